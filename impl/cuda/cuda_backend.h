#pragma once
// The `cuda` backend: fused kernels for Hopper (sm_90) in place of the reference's attention,
// q/k norm + RoPE and GeGLU; RMSNorm, the MoE experts and the shared-KV hand-off stay the reference's.
#include <vector>

#include "impl/backend.h"

namespace gemma4::impl {

// `cuda` (the attention backward adds dQ with atomics: fast, not bitwise-reproducible) and
// `cuda-deterministic` (the same kernels, dQ added in a fixed order).
std::vector<Backend> cuda_backends();

}  // namespace gemma4::impl
