#include "reference/decoder_layer.h"

#include <ATen/ATen.h>

#include <cmath>

#include "reference/ops.h"

namespace gemma4 {
namespace {

using torch::Tensor;

struct AttentionOutputs {
  Tensor out;   // [B, S, H] after o_proj
  Tensor k, v;  // [B, Hkv, S, D] as used
};

AttentionOutputs attention(const Config& c, int l, const AttentionWeights& w, const Tensor& x, const LayerInputs& in,
                           const LayerOps& ops) {
  const LayerSpec& spec = c.layers[l];
  const int64_t B = x.size(0), S = x.size(1), D = spec.head_dim;
  const RopeTable rope{in.rope_cos, in.rope_sin, in.rope_positions};

  const Tensor q_raw = ops.linear(x, w.q_proj).view({B, S, -1, D});
  Tensor q, k, v;
  if (spec.kv_shared) {
    // Borrowed from the storing layer (GEMMA4.md, KV sharing): no projections of its own. The q
    // path still runs through the fused op, with the borrowed K/V passed through untouched.
    q = ops.qk_norm_rope(q_raw, Tensor(), Tensor(), w.q_norm, Tensor(), rope, c.rms_norm_eps).q;
    k = in.shared_k;
    v = in.shared_v;
  } else {
    const Tensor k_raw = ops.linear(x, w.k_proj).view({B, S, -1, D});
    // K=V full layers have no v_proj: v comes from the raw key projection inside the op.
    const Tensor v_raw = spec.k_eq_v ? Tensor() : ops.linear(x, w.v_proj).view({B, S, -1, D});
    const QkvOutputs qkv = ops.qk_norm_rope(q_raw, k_raw, v_raw, w.q_norm, w.k_norm, rope, c.rms_norm_eps);
    q = qkv.q;
    k = qkv.k;
    v = qkv.v;
  }
  Tensor out;
  if (in.cache) {  // decoding: the step's K/V join the cache, the queries attend to all of it
    if (!spec.kv_shared) in.cache_ops->update(*in.cache, k, v, in.cache_start);
    out = in.cache_ops->attention(q, *in.cache,
                                  {spec.type, c.sliding_window, in.cache_start, in.padding, spec.kv_shared});
  } else {
    out = ops.attention(q, k, v, attention_spec(c, spec.type, in.padding, in.segments));
  }
  return {ops.linear(out, w.o_proj), k, v};
}

}  // namespace

Tensor mlp(const MlpWeights& w, const Tensor& x, const LayerOps& ops) {
  return ops.linear(ops.geglu(ops.linear(x, w.gate_proj), ops.linear(x, w.up_proj)), w.down_proj);
}

// The MoE branch (GEMMA4.md, Forward 4): the router reads the residual stream, not the MLP's
// output; the experts are a replaceable op.
Tensor moe(const Config& c, const MoeWeights& w, const Tensor& residual, const LayerOps& ops, Tensor* router_logits_out) {
  const Tensor flat = residual.reshape({-1, c.hidden_size});
  const double eps = c.rms_norm_eps;

  const Tensor z = ops.rms_norm(flat, Tensor(), eps) * w.router_scale * std::pow(static_cast<double>(c.hidden_size), -0.5);
  const Tensor router_logits = ops.linear(z, w.router_proj).to(torch::kFloat32);
  if (router_logits_out) *router_logits_out = router_logits;
  auto [top_weights, top_index] = ops.route(router_logits, c.top_k_experts);
  top_weights = top_weights * w.per_expert_scale.index({top_index});

  const Tensor x = ops.rms_norm(flat, w.pre_feedforward_layernorm_2, eps);
  const Tensor out = ops.moe_experts(x, top_index, top_weights, w.gate_up_proj, w.down_proj);
  return ops.rms_norm(out.reshape(residual.sizes()), w.post_feedforward_layernorm_2, eps);
}

// Per-layer embeddings enter each layer through a gated projection (GEMMA4.md, Forward 4).
Tensor per_layer_input_branch(const Config& c, const LayerWeights& w, const Tensor& h, const Tensor& ple,
                              const LayerOps& ops) {
  const Tensor gated = ops.geglu(ops.linear(h, w.per_layer_input_gate), ple);
  return ops.rms_norm(ops.linear(gated, w.per_layer_projection), w.post_per_layer_input_norm, c.rms_norm_eps);
}

LayerOutputs decoder_layer(const Config& c, int l, const LayerWeights& w, const LayerInputs& in, const LayerOps& ops) {
  const double eps = c.rms_norm_eps;
  const auto& norm = ops.rms_norm;
  Tensor residual = in.hidden;
  const AttentionOutputs attn = attention(c, l, w.attn, norm(residual, w.input_layernorm, eps), in, ops);
  Tensor h = residual + norm(attn.out, w.post_attention_layernorm, eps);

  residual = h;
  Tensor x = mlp(w.mlp, norm(h, w.pre_feedforward_layernorm, eps), ops);
  Tensor router_logits;
  if (c.enable_moe_block) {
    x = norm(x, w.moe.post_feedforward_layernorm_1, eps) + moe(c, w.moe, residual, ops, &router_logits);
  }
  h = residual + norm(x, w.post_feedforward_layernorm, eps);

  if (c.hidden_size_per_layer_input > 0) h = h + per_layer_input_branch(c, w, h, in.per_layer_input, ops);
  h = ops.scale_layer_output(h, w.layer_scalar);

  LayerOutputs out{h, attn.out, Tensor(), Tensor(), router_logits};
  if (!c.layers[l].kv_shared) {
    out.k = attn.k;
    out.v = attn.v;
  }
  return out;
}

std::vector<torch::Tensor> trainable_tensors(const Config& c, int l, const LayerWeights& w) {
  std::vector<Tensor> out;
  // The slots are only read here; weight_slots hands out pointers for loading as well.
  for (const WeightSlot& slot : layer_weight_slots(c, l, const_cast<LayerWeights&>(w))) {
    if (slot.tensor->defined() && slot.tensor->requires_grad()) out.push_back(*slot.tensor);
  }
  return out;
}

}  // namespace gemma4
