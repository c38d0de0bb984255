#include "reference/layer_ops.h"

#include <ATen/ATen.h>

namespace gemma4 {
namespace {

QkvOutputs eager_qk_norm_rope(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& q_norm, const torch::Tensor& k_norm, const RopeTable& rope,
                              double eps) {
  const torch::Tensor q_out = apply_rope(rms_norm(q, q_norm, eps), rope);
  if (!k.defined()) return {q_out, torch::Tensor(), torch::Tensor()};  // a KV-shared layer: q only
  // K=V full layers: the value is the raw key projection, normalised without scale.
  const torch::Tensor v_raw = v.defined() ? v : k;
  return {q_out, apply_rope(rms_norm(k, k_norm, eps), rope).transpose(1, 2),
          rms_norm(v_raw, torch::Tensor(), eps).transpose(1, 2)};
}

torch::Tensor eager_masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const AttentionSpec& spec) {
  return eager_attention(q, k, v, attention_mask(spec, q.size(0), q.size(1), q.scalar_type(), q.device()));
}

torch::Tensor eager_geglu(const torch::Tensor& gate, const torch::Tensor& up) { return gelu_tanh(gate) * up; }

// Experts are visited in index order and accumulated with index_add, as transformers does, so
// fp32 sums round the same way.
torch::Tensor eager_moe_experts(const torch::Tensor& x, const torch::Tensor& top_index, const torch::Tensor& top_weights,
                                const torch::Tensor& gate_up_proj, const torch::Tensor& down_proj) {
  const int64_t num_experts = gate_up_proj.size(0), I = down_proj.size(2);
  torch::Tensor out = at::zeros_like(x);
  const torch::Tensor expert_mask = at::one_hot(top_index, num_experts).permute({2, 1, 0});  // [E, K, T]
  const torch::Tensor hit = (expert_mask.sum({1, 2}) > 0).cpu();
  for (int64_t e = 0; e < num_experts; ++e) {
    if (!hit[e].item<bool>()) continue;
    const auto where = at::where(expert_mask[e]);
    const torch::Tensor& k_pos = where[0];
    const torch::Tensor& token = where[1];
    const torch::Tensor gate_up = at::linear(x.index_select(0, token), gate_up_proj[e]);
    torch::Tensor h = eager_geglu(gate_up.slice(-1, 0, I), gate_up.slice(-1, I));
    h = at::linear(h, down_proj[e]) * top_weights.index({token, k_pos}).unsqueeze(-1);
    out = out.index_add(0, token, h.to(out.scalar_type()));
  }
  return out;
}

torch::Tensor eager_scaled_embedding(const torch::Tensor& table, const torch::Tensor& ids, const torch::Tensor& scale,
                                     int64_t padding_idx) {
  return at::embedding(table, ids, padding_idx) * scale.to(ids.device());
}

// As transformers: softmax over all experts, then the top k, renormalised over those k.
std::pair<torch::Tensor, torch::Tensor> eager_route(const torch::Tensor& router_logits, int64_t top_k) {
  auto [top_weights, top_index] = at::softmax(router_logits, -1).topk(top_k, -1);
  return {top_weights / top_weights.sum(-1, /*keepdim=*/true), top_index};
}

torch::Tensor eager_scale_layer_output(const torch::Tensor& h, const torch::Tensor& layer_scalar) {
  return h * layer_scalar;
}

torch::Tensor eager_logit_softcap(const torch::Tensor& logits, double cap) { return at::tanh(logits / cap) * cap; }

torch::Tensor eager_linear(const torch::Tensor& x, const torch::Tensor& weight) { return at::linear(x, weight); }

}  // namespace

const LayerOps& reference_layer_ops() {
  static const LayerOps ops{rms_norm,
                            eager_qk_norm_rope,
                            eager_masked_attention,
                            eager_geglu,
                            eager_moe_experts,
                            eager_scaled_embedding,
                            eager_route,
                            eager_scale_layer_output,
                            eager_logit_softcap,
                            eager_linear};
  return ops;
}

}  // namespace gemma4
