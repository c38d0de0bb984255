// layer_group: one group of six consecutive decoder layers, the geometry's first six (in the 31B
// pattern: five sliding layers, then one global), forward and backward at batch 1, for every
// measured backend whose capabilities accept all six layers (head dims, window):
//   hidden [1, S, H] -> decoder_layer x 6 with the backend's LayerOps (as the reference model runs
//   its layers with ForwardOptions::ops) -> the backward of sum(out * upstream) w.r.t. the hidden
//   input and every trainable weight (torch::autograd::grad with `upstream` as the gradient).
// Weights are made on the device in the geometry's dtype, one per layer_weight_slots slot
// (reference/weights.h), from the distributions of random_weight: uniform(0.5, 1.5) for the 1-D
// norm scales and layer_scalar, zero-mean uniform with variance 1/fan_in for the matrices. They are
// drawn with torch's generator rather than the CPU-only counter generator: a 31B group has 2.9 G
// parameters, and their exact values do not matter for timing.
#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "bench/case_cache.h"
#include "bench/memory_estimate.h"
#include "bench/registration.h"
#include "bench/run.h"
#include "reference/decoder_layer.h"
#include "reference/ops.h"
#include "reference/weights.h"

namespace gemma4::bench {
namespace {

using torch::Tensor;

constexpr int kGroupLayers = 6;
constexpr int kWarmup = 1;

struct LayerGroup {
  std::vector<LayerWeights> weights;  // one per layer
  Tensor hidden, upstream;            // [1, S, H]
  std::vector<Tensor> wrt;            // hidden, then every trainable weight
  std::map<LayerType, RopeTable> rope;
};

Tensor device_weight(const WeightSlot& slot, const torch::TensorOptions& opts) {
  const Tensor w = at::empty(slot.shape, opts);
  if (slot.shape.size() == 1) return w.uniform_(0.5, 1.5);
  const double a = std::sqrt(3.0 / static_cast<double>(slot.shape.back()));  // variance a^2 / 3 = 1 / fan_in
  return w.uniform_(-a, a);
}

LayerGroup make_group(const Geometry& g, int64_t S) {
  const Config& c = g.config;
  const auto opts = torch::TensorOptions().dtype(g.dtype).device(g.device);
  LayerGroup group;
  group.hidden = at::randn({1, S, c.hidden_size}, opts).requires_grad_(true);
  group.upstream = at::randn({1, S, c.hidden_size}, opts);
  group.wrt.push_back(group.hidden);
  group.weights.resize(kGroupLayers);
  for (int l = 0; l < kGroupLayers; ++l) {
    for (WeightSlot& slot : layer_weight_slots(c, l, group.weights[l])) {
      *slot.tensor = device_weight(slot, opts).requires_grad_(slot.trainable);
      if (slot.trainable) group.wrt.push_back(*slot.tensor);
    }
  }
  for (LayerType type : {LayerType::kSliding, LayerType::kFull}) {
    group.rope[type] = rope_table(c.rope.at(type), layer_of_type(c, type).head_dim, S, g.dtype, g.device);
  }
  return group;
}

bool supports(const impl::Backend& b, const Geometry& g) {
  for (int l = 0; l < kGroupLayers; ++l) {
    const LayerSpec& spec = g.config.layers[l];
    const int64_t window = spec.type == LayerType::kSliding ? g.config.sliding_window : 0;
    if (!b.capabilities.unsupported(g.device, g.dtype, spec.head_dim, window).empty()) return false;
  }
  return true;
}

void register_case(const impl::Backend& b, const Geometry& g, int64_t S) {
  if (!supports(b, g)) return;
  const std::string name = benchmark_name("layer_group", b.name, g, S, /*backward=*/true);
  const Work work = layer_group_work(g.config, 0, kGroupLayers, S, /*backward=*/true);
  const double bytes = layer_group_bytes(g.config, 0, kGroupLayers, S, g.element_bytes(), materialises_scores(b.ops));
  register_benchmark(name, [&b, &g, S, name, work, bytes](benchmark::State& state) {
    run_benchmark(state, g.device, work, kWarmup, [&] {
      const LayerGroup& group = cached_case<LayerGroup>(name, g.device, bytes, [&] { return make_group(g, S); });
      const auto forward = [&b, &g, &group] {
        Tensor h = group.hidden;
        for (int l = 0; l < kGroupLayers; ++l) {
          const RopeTable& rope = group.rope.at(g.config.layers[l].type);
          const LayerInputs in{h, Tensor(), Tensor(), Tensor(), rope.cos, rope.sin, Tensor()};
          h = decoder_layer(g.config, l, group.weights[l], in, b.ops).hidden;
        }
        return std::vector<Tensor>{h};
      };
      return op_step(/*backward=*/true, forward, group.wrt, {group.upstream});
    });
  });
}

}  // namespace

void register_layer_benchmarks(const Suite& suite) {
  for (const Geometry& g : suite.geometries) {
    for (int64_t S : g.layer_group_seq_lens) {
      for (const impl::Backend& b : suite.backends) register_case(b, g, S);
    }
  }
}

}  // namespace gemma4::bench
