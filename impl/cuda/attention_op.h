#pragma once
// LayerOps::attention on the fused kernels (impl/cuda/attention_*.cu): CUDA bf16/fp16 tensors,
// head dims up to 512 (smaller ones are zero-padded to the next kernel head dim: 64, 256, 512).
#include <torch/types.h>

#include "reference/ops.h"

namespace gemma4::impl::cuda {

// How the backward sums dQ over key blocks (attention_kernels.h): in arrival order (atomics, the
// default), or in a fixed order, bitwise-reproducible.
enum class DqOrder { kArrival, kFixed };

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const AttentionSpec& spec, DqOrder dq_order);

}  // namespace gemma4::impl::cuda
