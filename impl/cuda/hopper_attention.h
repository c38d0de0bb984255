#pragma once
// The Hopper (sm_90a: TMA + wgmma, warp-specialised) attention kernels, behind the launch
// interface of attention_kernels.h; launch_attention_forward sends the head dims they cover here.
#include "impl/cuda/attention_kernels.h"

namespace gemma4::impl::cuda::hopper {

bool forward_supported(int head_dim);
void launch_forward(AttentionDtype dtype, const AttentionForwardArgs& args, cudaStream_t stream);

}  // namespace gemma4::impl::cuda::hopper
