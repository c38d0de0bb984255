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

}  // namespace

const LayerOps& reference_layer_ops() {
  static const LayerOps ops{rms_norm, eager_qk_norm_rope, eager_masked_attention, eager_geglu};
  return ops;
}

}  // namespace gemma4
