#pragma once
// The fused elementwise ops of the cuda backend: drop-in, differentiable replacements for the
// reference's qk_norm_rope and geglu (reference/layer_ops.h) on CUDA tensors in fp32, bf16 or
// fp16, with fp32 math inside and one rounding per output.
#include "reference/layer_ops.h"

namespace gemma4::impl::cuda {

// As LayerOps::qk_norm_rope. k and v come out contiguous in [B, Hkv, S, D]; the transpose is
// part of the kernel's write. q_norm and k_norm (when k is given) must be defined.
QkvOutputs fused_qk_norm_rope(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& q_norm, const torch::Tensor& k_norm, const RopeTable& rope,
                              double eps);

// gelu_tanh(gate) * up for gate and up of one shape.
torch::Tensor fused_geglu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace gemma4::impl::cuda
