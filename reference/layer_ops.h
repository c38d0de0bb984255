#pragma once
// The ops inside a decoder layer that a backend may replace (impl/ registers backends). The
// reference decoder calls every one of them through this table; reference_layer_ops() holds the
// eager reference ops, which define the right answer (GEMMA4.md, Forward 4 and 5). Each op is a
// differentiable function of tensors: a replacement either composes ATen ops or registers its
// own autograd function.
#include <torch/types.h>

#include <functional>
#include <utility>

#include "reference/config.h"
#include "reference/ops.h"

namespace gemma4 {

struct QkvOutputs {
  torch::Tensor q;     // [B, S, Hq, D] after norm and RoPE
  torch::Tensor k, v;  // [B, Hkv, S, D]; k after norm and RoPE, v after the unscaled norm
};

struct LayerOps {
  // x * rsqrt(mean(x^2) + eps) * weight in fp32, cast back; an undefined weight means no scale.
  std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& weight, double eps)> rms_norm;
  // The fused q/k norm + RoPE (+ v norm) of one layer from the raw projections q [B, S, Hq, D],
  // k [B, S, Hkv, D] and v [B, S, Hkv, D]; v undefined on K=V layers (v then comes from k); k
  // (and k_norm) undefined on KV-shared layers, which need only q.
  std::function<QkvOutputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& q_norm, const torch::Tensor& k_norm, const RopeTable& rope, double eps)>
      qk_norm_rope;
  // Softmax attention with scale 1: q [B, S, Hq, D], k and v [B, Hkv, S, D] -> [B, S, Hq * D].
  std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const AttentionSpec& spec)>
      attention;
  // gelu_tanh(gate) * up: the GeGLU activation of the MLP, the experts and the PLE gate.
  std::function<torch::Tensor(const torch::Tensor& gate, const torch::Tensor& up)> geglu;
  // The routed experts of the MoE branch: x [T, H] (normed tokens), top_index [T, K] int64,
  // top_weights [T, K] fp32 (renormalised, per-expert scaled), gate_up_proj [E, 2I, H] (gate
  // half first), down_proj [E, H, I] -> sum_k top_weights[t, k] * down(geglu(gate_up x_t)), [T, H].
  std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& top_index, const torch::Tensor& top_weights,
                              const torch::Tensor& gate_up_proj, const torch::Tensor& down_proj)>
      moe_experts;

  // The steps around those ops that a port or a fused kernel also writes its own way, and that
  // real ports got wrong (GEMMA4.md, "Known failure modes"): each is here so that a backend can
  // replace it and a faulty backend can show the suite catching the bug.
  // table[ids] * scale: the token embedding (scale sqrt(H)) and the per-layer embedding (sqrt(P)),
  // `scale` a 0-dim tensor already cast to the table's dtype; row padding_idx gets no gradient.
  std::function<torch::Tensor(const torch::Tensor& table, const torch::Tensor& ids, const torch::Tensor& scale,
                              int64_t padding_idx)>
      scaled_embedding;
  // The MoE router's choice from router_logits [T, E] fp32: {weights [T, K] fp32, index [T, K]
  // int64}, the top_k softmax probabilities renormalised to sum 1 (before per_expert_scale).
  std::function<std::pair<torch::Tensor, torch::Tensor>(const torch::Tensor& router_logits, int64_t top_k)> route;
  // A layer's output times its layer_scalar [1] (a loaded buffer, not 1 in general).
  std::function<torch::Tensor(const torch::Tensor& hidden, const torch::Tensor& layer_scalar)> scale_layer_output;
  // cap * tanh(logits / cap): the final logit soft-cap, when the config has one.
  std::function<torch::Tensor(const torch::Tensor& logits, double cap)> logit_softcap;
  // x [..., K] @ weight [N, K]^T -> [..., N]: every projection of the layer (q, k, v, o, the MLP's,
  // the PLE gate and projection, the router's) and of the model (per-layer projection, LM head).
  std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& weight)> linear;
};

const LayerOps& reference_layer_ops();

}  // namespace gemma4
