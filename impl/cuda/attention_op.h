#pragma once
// LayerOps::attention on the fused kernels (impl/cuda/attention_*.cu): CUDA bf16/fp16 tensors,
// head dims up to 512 (smaller ones are zero-padded to the next kernel head dim: 64, 256, 512).
#include <torch/types.h>

#include "impl/cuda/attention_kernels.h"
#include "reference/ops.h"

namespace gemma4::impl::cuda {

// Forward and backward are both deterministic: every output element is written once (the backward
// in two passes, dK/dV key-major and dQ query-major: attention_kernels.h).
torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const AttentionSpec& spec);

// The kernels' element type of a tensor dtype: bf16 or f16, the only dtypes the backend declares.
inline AttentionDtype attention_kernel_dtype(torch::ScalarType t) {
  return t == torch::kBFloat16 ? AttentionDtype::kBFloat16 : AttentionDtype::kFloat16;
}

}  // namespace gemma4::impl::cuda
