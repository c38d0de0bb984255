#include "bench/memory/activation_estimate.h"

#include <algorithm>
#include <cmath>

#include "reference/error.h"
#include "reference/weights.h"

namespace gemma4::memory {
namespace {

constexpr double kF32 = 4;  // bytes of the fp32 temporaries the norms and the softmax compute in
// The decode kernel's plan fills about one wave of CTAs: 132 SMs (H100, H200) x 2 CTAs each.
constexpr double kHopperCtaSlots = 264;

// Widths per token of one decoder layer (ACTIVATION_MEMORY.md, "Notation").
struct Widths {
  double H, Q, K, I, P, Hq;
  bool own_kv, k_eq_v;
  // MoE: experts E, routed per token k, expert width Im.
  bool moe;
  double E, k, Im;
};

Widths widths(const Config& c, int layer) {
  const LayerSpec& s = c.layers[layer];
  return {static_cast<double>(c.hidden_size),
          static_cast<double>(c.num_attention_heads * s.head_dim),
          static_cast<double>(s.num_kv_heads * s.head_dim),
          static_cast<double>(s.mlp_intermediate),
          static_cast<double>(c.hidden_size_per_layer_input),
          static_cast<double>(c.num_attention_heads),
          !s.kv_shared,
          s.k_eq_v,
          c.enable_moe_block,
          static_cast<double>(c.num_experts),
          static_cast<double>(c.top_k_experts),
          static_cast<double>(c.moe_intermediate_size)};
}

// Bytes per token that autograd keeps for one layer's backward, plus its output hidden
// (ACTIVATION_MEMORY.md, "Training: retained"). e: element bytes.
double retained_per_token(const Widths& w, Kernels kernels, double e) {
  const bool fused = kernels == Kernels::kFused;
  const double own = w.own_kv ? 1 : 0;
  // Four scaled RMSNorms over H (the reference's op in both kernel sets): the fp32 copy of the input
  // and the fp32 normalised value.
  double bytes = 4 * 2 * kF32 * w.H;
  // q/k norm + RoPE, and the value's unscaled norm.
  if (fused) {
    bytes += e * w.Q + own * e * w.K + (w.own_kv && !w.k_eq_v ? e * w.K : 0);  // the raw projections
  } else {
    bytes += 2 * kF32 * w.Q + own * 2 * kF32 * w.K + own * kF32 * w.K;  // the norms' fp32 tensors
    bytes += 2 * e * w.Q + own * 2 * e * w.K;                           // RoPE: its input and rotate_half
  }
  bytes += e * (2 * w.H + w.Q + w.I);  // the inputs of the projections: x, attention out, x2, GeGLU out
  if (fused) {
    bytes += e * w.Q + own * 2 * e * w.K + kF32 * w.Hq;  // attention: q, own k and v, the log-sum-exp
    bytes += 2 * e * w.I;                                // GeGLU: gate and up
  } else {
    bytes += 3 * e * w.Q;  // attention: q and k, v repeated to every query head
    bytes += 3 * e * w.I;  // GeGLU: gate, gelu(gate), up
  }
  bytes += e * w.H;  // the output hidden
  if (w.P > 0) {     // PLE: gate input, GeGLU, projection input, its norm
    bytes += e * w.H + (fused ? 2 : 3) * e * w.P + e * w.P + 2 * kF32 * w.H;
  }
  if (w.moe) {  // router norm, scale and projection; softmax; three scaled norms; routed rows
    bytes += kF32 * w.H + 2 * e * w.H + kF32 * w.E + 3 * 2 * kF32 * w.H;
    bytes += w.k * (2 * e * w.H + 4 * e * w.Im);
  }
  return bytes;
}

// Bytes per token a layer holds at its busiest moment without autograd (ACTIVATION_MEMORY.md,
// "Serving"): the residual, plus the largest of what is alive together in the MLP (its input,
// gate, up, the activation and its product or the fused kernel's output), in the attention block
// (its input, the raw and the normalised q, k, v, the output), in an RMSNorm over H (the fp32 copy,
// square and normalised value beside the bf16 output; the reference's q norm is as wide as Q), and
// in the MoE branch (the dense MLP's output waiting, the router norm's fp32 tensors, the one-hot
// routing mask [T, k, E] int64). The eager experts run one expert at a time: their rows are few.
double forward_per_token(const Widths& w, Kernels kernels, double e) {
  const bool fused = kernels == Kernels::kFused;
  const double own = w.own_kv ? 1 : 0;
  const double mlp = e * w.H + 4 * e * w.I;
  double attention = e * w.H + 3 * e * w.Q + own * 2 * e * w.K + 2 * e * w.K;
  if (!fused) attention += e * w.Q;  // the eager attention's K (then V) repeated to every query head
  const double norm = (3 * kF32 + e) * (fused ? w.H : std::max(w.H, w.Q));
  double moment = std::max({mlp, attention, norm});
  if (w.moe) moment = std::max(moment, (4 * e + 3 * kF32) * w.H + 8 * w.k * w.E);
  return e * w.H + moment;
}

// The score bytes per query-key pair of the reference's eager attention: kept for backward (the
// fp32 softmax and its cast) and held at its peak (scores, masked scores, fp32 softmax, cast).
constexpr double kSavedScore = kF32 + 2, kPeakScore = 2 + 2 + kF32 + 2;
// The mask [S, S]: int64 index difference, three bool comparisons, the additive mask.
constexpr double kMaskPerPair = 8 + 3 + 2;

// Weight gradients made before they join their buffers. Plain backward makes one at a time: the
// largest weight's. The eager MoE experts slice each expert's weights out of [E, ...] tensors: the
// slices' gradients are full-size tensors summed into a running sum, so two gate_up-sized tensors
// and the down projection's sum are alive together. A checkpoint's backward returns the gradients
// of every weight of the layer at once (reference/checkpoint.cpp: one autograd::grad call).
double weight_gradients(const Config& c, int layer, const Widths& w, Phase phase, double e) {
  double bytes = e * std::max({w.I * w.H, w.Q * w.H, w.K * w.H});
  if (phase == Phase::kTrainCheckpointed) {
    LayerWeights shapes_only;
    bytes = e * slot_elements(layer_weight_slots(c, layer, shapes_only));
  }
  if (w.moe) bytes = std::max(bytes, e * w.E * w.H * (2 * 2 * w.Im + w.Im));
  return bytes;
}

PartFigures layer_estimate(const Config& c, int layer, Phase phase, const StepShape& shape, Kernels kernels, double e) {
  const Widths w = widths(c, layer);
  const bool dense = kernels == Kernels::kReference;
  const double B = static_cast<double>(shape.batch);
  PartFigures f;
  if (phase == Phase::kDecode) {
    // One token per sequence; the attention reads `entries` cache rows per sequence.
    const LayerSpec& s = c.layers[layer];
    const double entries = s.type == LayerType::kSliding
                               ? std::min<double>(static_cast<double>(c.sliding_window), shape.context + 1.0)
                               : shape.context + 1.0;
    f.peak = B * forward_per_token(w, kernels, e);
    if (dense) {
      // The eager attention repeats the cache's K (then V) to every query head beside the scores
      // and the mask; the contiguous cache's append (a copy of both tensors) comes before and is
      // smaller.
      f.peak += B * entries * (e * w.Q + w.Hq * kPeakScore + kMaskPerPair);
    } else {
      // The split-K kernel's fp32 partials (o and two row statistics per split and query row): the
      // plan splits a (sequence, kv head) pair's cache into at most one split per 16 keys, and
      // across pairs about one wave of CTAs (Hopper: 132 SMs x 2); a pair is never split less than once.
      const double pairs = B * w.K / s.head_dim, group = w.Q / w.K;
      const double splits = std::min(pairs * std::ceil(entries / 16), std::max(pairs, kHopperCtaSlots));
      f.peak += splits * group * (s.head_dim + 2) * kF32;
    }
    return f;
  }
  const double T = static_cast<double>(shape.tokens) * B, S = static_cast<double>(shape.tokens);
  const double pairs = B * S * S;
  if (phase == Phase::kPrefill) {
    f.retained = T * e * (w.H + (w.own_kv ? 2 * w.K : 0));
    f.peak = T * forward_per_token(w, kernels, e) + (dense ? pairs * (w.Hq * kPeakScore + kMaskPerPair) : 0);
    return f;
  }
  const double retained = T * retained_per_token(w, kernels, e) + (dense ? pairs * w.Hq * kSavedScore : 0);
  // Backward's own allocations on top of what forward kept: gradients of the widest intermediate
  // tensors alive together with a norm's fp32 temporaries, the score gradients, and one weight's
  // gradient before it joins its buffer.
  const double transient = T * (3 * e * w.I + 3 * kF32 * std::max(w.H, w.Q)) +
                           (dense ? pairs * (w.Hq * kPeakScore + kMaskPerPair) : 0) +
                           weight_gradients(c, layer, w, phase, e);
  if (phase == Phase::kTrain) {
    f.retained = retained;
    f.peak = retained + transient;
  } else {  // checkpointed: forward keeps the output (and stored K/V); backward recomputes the layer
    const LayerSpec& s = c.layers[layer];
    f.retained = T * e * (w.H + (s.stores_kv ? 2 * w.K : 0));
    f.peak = f.retained + retained + transient;
  }
  return f;
}

// The edges (ACTIVATION_MEMORY.md, "Edges"): embeddings and per-layer inputs, RoPE tables, final
// norm, LM head, soft-cap and, in training, the loss over every token.
PartFigures edges_estimate(const Config& c, Phase phase, const StepShape& shape, double e) {
  const double B = static_cast<double>(shape.batch), H = static_cast<double>(c.hidden_size);
  const double V = static_cast<double>(c.vocab_size);
  const double LP = static_cast<double>(c.num_hidden_layers * c.hidden_size_per_layer_input);
  const double S = phase == Phase::kDecode ? 1 : static_cast<double>(shape.tokens), T = B * S;
  // RoPE tables per token (row): cos and sin of each layer type's head dim; while the widest is
  // made, its fp32 frequencies, angles, cos and sin.
  double rope = 0, widest = 0;
  for (const auto& [type, params] : c.rope) {
    const double d = static_cast<double>(head_dim_of(c, type));
    rope += 2 * e * d;
    widest = std::max(widest, d);
  }
  const double rope_peak = rope + 3.5 * kF32 * widest;
  PartFigures f;
  // Embeddings: the lookup and its scaled copy; PLE: the token table's rows and their scaled copy,
  // the projection, and its norm's fp32 copy, square and normalised value.
  const double embed = e * H + e * LP;  // what stays: h and the per-layer inputs
  const double embed_peak = std::max(2 * e * H, e * H + (2 * e + 3 * kF32) * LP);
  if (!is_training(phase)) {
    // The head over each sequence's last token: logits, the soft-cap's quotient, tanh and product.
    const double rows = phase == Phase::kDecode ? 0 : S;  // decode: the tables belong to the run
    f.retained = T * embed + rows * rope;
    f.peak = std::max({T * embed_peak, T * embed + rows * rope_peak, f.retained + B * 4 * e * V});
    return f;
  }
  // Training: the PLE norm's fp32 tensors, the head's norm and input, the soft-cap's tanh, the
  // loss's fp32 log-softmax; at the peak, backward of the loss and the soft-cap over [T, V] with
  // the tied head's weight gradient, or later, when the head's tensors are gone, the embeddings'
  // backward with the tables' dense gradients. With tied embeddings the LM head's gradient of the
  // table waits in autograd's input buffer for the lookup's, and their sum is a third tensor; the
  // PLE table's gradient comes on its own (the two moments do not coincide).
  const double kept_embed = embed + (LP > 0 ? 2 * kF32 * LP + e * H : 0);
  const double kept_head = 2 * kF32 * H + e * H + e * V + kF32 * V;
  f.retained = T * (kept_embed + kept_head) + S * rope;
  const double head_backward = T * (2 * kF32 * V + 2 * e * V) + e * V * H;
  const double tied = c.tie_word_embeddings ? e * V * H : 0;
  const double table_gradients = tied + std::max(2 * e * V * H, e * V * LP);
  f.peak = std::max(f.retained + head_backward, T * (kept_embed + 2 * e * H) + S * rope + table_gradients);
  return f;
}

}  // namespace

Kernels kernels_of_backend(const std::string& backend) {
  if (backend == "reference") return Kernels::kReference;
  if (backend == "cuda" || backend == "cuda-deterministic") return Kernels::kFused;
  throw Error("no activation estimate for backend '" + backend + "' (known: reference, cuda, cuda-deterministic)");
}

PartFigures estimate_part(const Config& c, Part part, Phase phase, const StepShape& shape, Kernels kernels,
                          int64_t element_bytes) {
  const double e = static_cast<double>(element_bytes);
  if (part == Part::kEdges) return edges_estimate(c, phase, shape, e);
  if (part == Part::kStack) throw Error("the stack is combined from its parts");
  const std::optional<int> layer = layer_of_part(c, part);
  if (!layer) throw Error("the config has no " + part_name(part) + " layer");
  return layer_estimate(c, *layer, phase, shape, kernels, e);
}

double estimate_bytes(const Config& c, const MemoryPoint& p, int64_t element_bytes) {
  const Kernels kernels = kernels_of_backend(p.backend);
  const StepShape shape{p.phase == Phase::kDecode ? 1 : p.tokens, p.batch, p.context};
  if (p.part != Part::kStack && p.part != Part::kWhole)
    return estimate_part(c, p.part, p.phase, shape, kernels, element_bytes).peak;
  std::map<Part, PartFigures> parts;
  parts[Part::kEdges] = estimate_part(c, Part::kEdges, p.phase, shape, kernels, element_bytes);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Part part = part_of_layer(c, l);
    if (!parts.count(part)) parts[part] = estimate_part(c, part, p.phase, shape, kernels, element_bytes);
  }
  return combine_stack(c, p.phase, shape, element_bytes, parts);
}

}  // namespace gemma4::memory
