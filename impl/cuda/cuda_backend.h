#pragma once
// The `cuda` backend: fused kernels for Hopper (sm_90) in place of the reference's attention,
// q/k norm + RoPE and GeGLU; RMSNorm, the MoE experts and the shared-KV hand-off stay the reference's.
#include <vector>

#include "impl/backend.h"

namespace gemma4::impl {

// `cuda` and `cuda-deterministic`: the same kernels, all deterministic (the attention backward has
// no atomics since its dQ got a pass of its own); the second name is kept for the baselines and
// scoreboard rows recorded under it.
std::vector<Backend> cuda_backends();

}  // namespace gemma4::impl
