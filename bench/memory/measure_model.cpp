// The model-level measurements: the edges (embeddings, per-layer inputs, RoPE tables, final norm,
// LM head, loss) alone, and the whole model run directly where it fits, which checks the stack's
// combination of parts (ACTIVATION_MEMORY.md, "Combining").
#include "bench/memory/measure_model.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <optional>
#include <vector>

#include "bench/memory/step_tensors.h"
#include "impl/memory/probe.h"
#include "reference/error.h"
#include "reference/model.h"
#include "reference/ops.h"

namespace gemma4::memory {
namespace {

using torch::Tensor;

// The model's own tensors (embeddings, PLE tables and projection, final norm, LM head), not the
// layers': a Model whose layers are never run.
Model edges_model(const Config& c, bool train, const torch::TensorOptions& o) {
  ModelWeights w;
  std::vector<WeightSlot> slots;
  for (const WeightSlot& slot : weight_slots(c, w)) {
    if (slot.name.rfind("layers.", 0) != 0) slots.push_back(slot);
  }
  fill_slots(slots, train, o);
  return Model(c, std::move(w));
}

}  // namespace

PartFigures measure_edges(const Config& c, Phase phase, const StepShape& shape, const LayerOps& ops,
                          const torch::TensorOptions& o) {
  const bool train = is_training(phase);
  const Model model = edges_model(c, train, o);
  const Probe probe(o.device());
  const int64_t B = shape.batch, S = phase == Phase::kDecode ? 1 : shape.tokens;
  std::optional<torch::NoGradGuard> no_grad;
  if (!train) no_grad.emplace();
  const Tensor ids = torch::randint(c.vocab_size, {B, S}, o.dtype(torch::kInt64));
  Tensor last = torch::randn({B, train ? S : 1, c.hidden_size}, o);
  if (train) with_grad_buffer(last);
  const Tensor labels = train ? torch::randint(c.vocab_size, {B, S}, o.dtype(torch::kInt64)) : Tensor();
  const Tensor up_hidden = train ? torch::randn({B, S, c.hidden_size}, o) : Tensor();
  const Tensor up_ple = train && c.hidden_size_per_layer_input > 0
                            ? torch::randn({B, S, c.num_hidden_layers, c.hidden_size_per_layer_input}, o)
                            : Tensor();
  const auto rope_tables = [&c, &o](int64_t rows) {
    std::vector<Tensor> out;
    for (const auto& [type, rope] : c.rope) {
      const int64_t d = head_dim_of(c, type);
      if (d == 0) continue;  // a rope entry for a type no layer has
      const RopeTable t = rope_table(rope, d, rows, o.dtype().toScalarType(), o.device());
      out.insert(out.end(), {t.cos, t.sin});
    }
    return out;
  };
  const std::vector<Tensor> decode_rope =
      phase == Phase::kDecode ? rope_tables(shape.context + 1) : std::vector<Tensor>();

  const int64_t base = probe.live();
  probe.reset_peak();
  PartFigures f;
  {
    auto [h, ple] = model.embed(ids);
    const std::vector<Tensor> rope = phase == Phase::kDecode ? std::vector<Tensor>() : rope_tables(S);
    // Serving: what stays alive under the layers (h, the per-layer inputs, the tables); training:
    // everything the forward keeps, the head's and the loss's tensors included (all alive when
    // backward starts).
    if (!train) f.retained = static_cast<double>(probe.live() - base);
    const Tensor logits = model.head(ops.rms_norm(last, model.weights().norm, c.rms_norm_eps));
    Tensor loss = train ? causal_lm_loss(logits, labels) : Tensor();
    if (train) f.retained = static_cast<double>(probe.live() - base);
    if (train) {
      std::vector<Tensor> outputs{loss, h}, upstream{torch::ones_like(loss), up_hidden};
      if (ple.defined()) {
        outputs.push_back(ple);
        upstream.push_back(up_ple);
      }
      torch::autograd::backward(outputs, upstream);
    }
  }
  f.peak = static_cast<double>(probe.peak() - base);
  return f;
}

PartFigures measure_whole(const Config& c, Phase phase, const StepShape& shape, const impl::Backend& backend,
                          const torch::TensorOptions& o) {
  const bool train = is_training(phase);
  ModelWeights w;
  fill_slots(weight_slots(c, w), train, o);
  const Model model(c, std::move(w));
  const Probe probe(o.device());
  const int64_t B = shape.batch;
  const auto i64 = o.dtype(torch::kInt64);
  PartFigures f;
  if (train) {
    const Tensor ids = torch::randint(c.vocab_size, {B, shape.tokens}, i64);
    ForwardOptions options;
    options.keep_hidden_states = false;
    options.ops = &backend.ops;
    if (backend.kv_handoff) options.kv_handoff = &backend.kv_handoff;
    if (phase == Phase::kTrainCheckpointed) options.checkpoint_layers.assign(c.num_hidden_layers, true);
    const int64_t base = probe.live();
    probe.reset_peak();
    {
      ForwardOutputs out = model.forward({ids, Tensor(), ids, Tensor()}, options);
      f.retained = static_cast<double>(probe.live() - base);
      out.loss.backward();
    }
    f.peak = static_cast<double>(probe.peak() - base);
    return f;
  }
  if (phase != Phase::kDecode) throw Error("the whole model is measured in training and decode only");
  // Decode: every cache filled with `context` entries (random K/V, as a prompt would leave them),
  // then one step of one token per sequence through Model::decode. The caches are the baseline.
  torch::NoGradGuard no_grad;
  const KvCacheOps& cache_ops = backend.kv_cache.make ? backend.kv_cache : reference_kv_cache_ops();
  const int64_t T = shape.context;
  DecodeState state = model.start_decode(B, T + 1, cache_ops);
  for (auto& [layer, cache] : state.caches) {
    const LayerSpec& spec = c.layers[layer];
    for (const auto& [start, count] : {std::pair<int64_t, int64_t>{0, T - 1}, {T - 1, 1}}) {
      const Tensor k = torch::randn({B, spec.num_kv_heads, count, spec.head_dim}, o);
      cache_ops.update(*cache, k, torch::randn_like(k), start);
    }
  }
  state.length = T;
  const Tensor ids = torch::randint(c.vocab_size, {B, 1}, i64);
  const Tensor positions = torch::full({B, 1}, T, i64), padding = torch::ones({B, T + 1}, i64);
  const int64_t base = probe.live();
  probe.reset_peak();
  {
    const Tensor logits = model.decode(state, ids, positions, padding, &backend.ops);
    f.retained = static_cast<double>(probe.live() - base);
  }
  const double cache_growth = static_cast<double>(std::max<int64_t>(0, probe.live() - base));
  f.peak = static_cast<double>(probe.peak() - base) - cache_growth;
  return f;
}

}  // namespace gemma4::memory
