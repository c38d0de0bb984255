#pragma once
// The `cuda` backend: fused kernels for Hopper (sm_90) in place of the reference's attention,
// q/k norm + RoPE and GeGLU; RMSNorm, the MoE experts and the shared-KV hand-off stay the reference's.
#include "impl/backend.h"

namespace gemma4::impl {

Backend cuda_backend();

}  // namespace gemma4::impl
