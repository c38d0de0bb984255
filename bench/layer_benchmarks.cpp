// Whole decoder layers at batch 1, for every measured backend (skipped as not supported where its
// capabilities exclude the device, the dtype or a layer's head dim or window):
//   layer_sliding    the first sliding layer with its own K/V (not on MoE geometries: see layer_moe);
//   layer_global     the first global layer with its own K/V (on 26b-a4b with its MoE branch);
//   layer_kv_shared  the first KV-shared layer (e2b, e4b: no k/v projections, q only). It reads the
//                    K/V of its source layer, [1, Hkv, S, D] tensors standing for that layer's
//                    output, through the backend's KV hand-off (reference/kv_handoff.h) as the
//                    model does: stored under the source's write key, read back as the layer's
//                    inputs under its read key, then the hand-off's in-layer step;
//   layer_moe        the first sliding layer of a MoE geometry (26b-a4b): attention, the dense MLP
//                    and the MoE branch (router, top-k, LayerOps::moe_experts);
//   layer_group      the first six layers (31B: five sliding, then one global), fwdbwd only.
// Each runs hidden [1, S, H] (and a PLE input [1, S, P] per layer where the config has per-layer
// inputs) through decoder_layer with the backend's LayerOps, as the reference model runs its
// layers (ForwardOptions::ops); fwdbwd then takes the gradient of sum(out * upstream) w.r.t. the
// hidden input, the PLE inputs, the borrowed K/V and every trainable weight
// (torch::autograd::grad with `upstream` as the gradient). Weights are made on the device in the
// geometry's dtype, one per layer_weight_slots slot (run.h: device_weight).
#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/case_cache.h"
#include "bench/memory_estimate.h"
#include "bench/registration.h"
#include "bench/run.h"
#include "reference/decoder_layer.h"
#include "reference/kv_handoff.h"
#include "reference/kv_sharing.h"
#include "reference/ops.h"
#include "reference/weights.h"

namespace gemma4::bench {
namespace {

using torch::Tensor;

constexpr int kGroupLayers = 6;
constexpr int kWarmup = 1;
constexpr KvKeyConvention kKvKey = KvKeyConvention::kLayerType;  // the model's default

const char* const kKinds[] = {"layer_sliding", "layer_global", "layer_kv_shared", "layer_moe"};

// The layer that `kind` measures in the config, if it has one.
std::optional<int> layer_of_kind(const std::string& kind, const Config& c) {
  const auto first = [&c](const std::function<bool(const LayerSpec&)>& pick) -> std::optional<int> {
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      if (pick(c.layers[l])) return l;
    }
    return std::nullopt;
  };
  const auto own_kv = [&first](LayerType type) {
    return first([type](const LayerSpec& s) { return s.type == type && !s.kv_shared; });
  };
  if (kind == "layer_sliding") return c.enable_moe_block ? std::nullopt : own_kv(LayerType::kSliding);
  if (kind == "layer_moe") return c.enable_moe_block ? own_kv(LayerType::kSliding) : std::nullopt;
  if (kind == "layer_global") return own_kv(LayerType::kFull);
  return first([](const LayerSpec& s) { return s.kv_shared; });  // layer_kv_shared
}

// Consecutive decoder layers and what they read.
struct Stack {
  std::vector<int> layers;
  std::vector<LayerWeights> weights;  // one per layer
  std::vector<Tensor> ple;            // [1, S, P] per layer, or empty without PLE
  std::map<int, SharedKv> borrowed;   // by source layer: the K/V of storing layers outside the stack
  std::map<LayerType, RopeTable> rope;
  Tensor hidden, upstream;  // [1, S, H]; upstream: backward only
  std::vector<Tensor> wrt;  // backward: hidden, PLE inputs, borrowed K/V, every trainable weight
};

Stack make_stack(const Geometry& g, const std::vector<int>& layers, int64_t S, bool backward) {
  const Config& c = g.config;
  const auto opts = torch::TensorOptions().dtype(g.dtype).device(g.device);
  Stack st;
  st.layers = layers;
  const auto input = [&](Tensor t) {
    if (backward) st.wrt.push_back(t.requires_grad_(true));
    return t;
  };
  st.hidden = input(at::randn({1, S, c.hidden_size}, opts));
  if (backward) st.upstream = at::randn({1, S, c.hidden_size}, opts);
  for (int l : layers) {
    const LayerSpec& spec = c.layers[l];
    if (c.hidden_size_per_layer_input > 0)
      st.ple.push_back(input(at::randn({1, S, c.hidden_size_per_layer_input}, opts)));
    const bool source_inside = std::find(layers.begin(), layers.end(), spec.kv_source) != layers.end();
    if (spec.kv_shared && !source_inside && !st.borrowed.count(spec.kv_source)) {
      const LayerSpec& source = c.layers[spec.kv_source];
      const std::vector<int64_t> shape{1, source.num_kv_heads, S, source.head_dim};
      Tensor k = input(at::randn(shape, opts));
      st.borrowed[spec.kv_source] = {k, input(at::randn(shape, opts))};
    }
    if (!st.rope.count(spec.type))
      st.rope[spec.type] = rope_table(c.rope.at(spec.type), spec.head_dim, S, g.dtype, g.device);
  }
  st.weights.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    for (WeightSlot& slot : layer_weight_slots(c, layers[i], st.weights[i])) {
      *slot.tensor = device_weight(slot.shape, opts);
      if (slot.trainable) input(*slot.tensor);
    }
  }
  return st;
}

// The stack's forward, as Model::forward runs its layers (without checkpointing): one KV hand-off
// per call, the borrowed K/V stored first as if their layers had just run.
std::vector<Tensor> forward(const Config& c, const impl::Backend& b, const Stack& st) {
  const std::unique_ptr<KvHandoff> handoff = b.kv_handoff ? b.kv_handoff(c) : local_kv_handoff(c);
  for (const auto& [source, kv] : st.borrowed) handoff->store(source, kv_write_key(c, source, kKvKey), kv);
  Tensor h = st.hidden;
  for (size_t i = 0; i < st.layers.size(); ++i) {
    const int l = st.layers[i];
    const LayerSpec& spec = c.layers[l];
    const RopeTable& rope = st.rope.at(spec.type);
    LayerInputs in{h, st.ple.empty() ? Tensor() : st.ple[i], Tensor(), Tensor(), rope.cos, rope.sin, Tensor()};
    if (spec.kv_shared) {
      const std::string key = kv_read_key(c, l, kKvKey);
      SharedKv kv = handoff->inputs_for(l, key);
      if (const KvHandoff::InLayer in_layer = handoff->in_layer(l, key)) kv = in_layer(kv);
      in.shared_k = kv.k;
      in.shared_v = kv.v;
    }
    const LayerOutputs out = decoder_layer(c, l, st.weights[i], in, b.ops);
    h = out.hidden;
    if (spec.stores_kv) handoff->store(l, kv_write_key(c, l, kKvKey), {out.k, out.v});
  }
  return {h};
}

// "" when the backend's capabilities accept every layer, else the first reason.
std::string unsupported(const impl::Backend& b, const Geometry& g, const std::vector<int>& layers) {
  for (int l : layers) {
    const LayerSpec& spec = g.config.layers[l];
    const int64_t window = spec.type == LayerType::kSliding ? g.config.sliding_window : 0;
    const std::string why = b.capabilities.unsupported(g.device, g.dtype, spec.head_dim, window);
    if (!why.empty()) return why;
  }
  return "";
}

void register_case(const std::string& op, const impl::Backend& b, const Geometry& g, const std::vector<int>& layers,
                   int64_t S, bool backward) {
  const std::string name = benchmark_name(op, b.name, g, S, backward);
  const Work work = layers_work(g.config, layers, S, backward);
  const double bytes = layers_bytes(g.config, layers, S, g.element_bytes(), materialises_scores(b.ops), backward);
  register_backend_benchmark(
      name, b, unsupported(b, g, layers), [&b, &g, layers, S, backward, name, work, bytes](benchmark::State& state) {
        run_benchmark(state, g.device, work, kWarmup, [&] {
          const Stack& st =
              cached_case<Stack>(name, g.device, bytes, [&] { return make_stack(g, layers, S, backward); });
          return op_step(backward, [&b, &g, &st] { return forward(g.config, b, st); }, st.wrt, {st.upstream});
        });
      });
}

}  // namespace

void register_layer_benchmarks(const Suite& suite) {
  for (const char* kind : kKinds) {
    for (const Geometry& g : suite.geometries) {
      const std::optional<int> layer = layer_of_kind(kind, g.config);
      if (!layer || !g.measures(kind)) continue;
      for (int64_t S : g.seq_lens) {
        for (bool backward : {false, true}) {
          for (const impl::Backend& b : suite.backends) register_case(kind, b, g, {*layer}, S, backward);
        }
      }
    }
  }
  std::vector<int> group(kGroupLayers);
  for (int l = 0; l < kGroupLayers; ++l) group[l] = l;
  for (const Geometry& g : suite.geometries) {
    if (g.config.num_hidden_layers < kGroupLayers || !g.measures("layer_group")) continue;
    for (int64_t S : g.layer_group_seq_lens) {
      for (const impl::Backend& b : suite.backends) register_case("layer_group", b, g, group, S, /*backward=*/true);
    }
  }
}

}  // namespace gemma4::bench
