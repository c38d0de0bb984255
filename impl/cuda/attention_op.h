#pragma once
// LayerOps::attention on the fused kernels (impl/cuda/attention_*.cu): CUDA bf16/fp16 tensors,
// head dims up to 512 (smaller ones are zero-padded to the next kernel head dim: 64, 256, 512).
#include <torch/types.h>

#include "reference/ops.h"

namespace gemma4::impl::cuda {

// Forward and backward are both deterministic: every output element is written once (the backward
// in two passes, dK/dV key-major and dQ query-major: attention_kernels.h).
torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const AttentionSpec& spec);

}  // namespace gemma4::impl::cuda
