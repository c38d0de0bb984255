#pragma once
// The fused attention kernels' launch interface: plain pointers and sizes, no LibTorch, so that
// the .cu files compile with nvcc alone. impl/cuda/attention_op.cpp is the LibTorch side.
//
// Layouts (B batch, S sequence, Hq query heads, Hkv kv heads, D the kernel's head dim):
//   q, o, dq, dout  [B, S, Hq, D]     (token-major, as the decoder produces q and consumes o)
//   k, v, dk, dv    [B, Hkv, S, D]
//   lse, delta      [B, Hq, S] fp32
//   key_valid       [B, S] int32, 1 token / 0 padding; null when there is no padding
// Query i may see key j when i - left <= j <= i + right, j is a token, and both are < S. That band
// covers causal sliding (left w-1, right 0), causal full (left S), and the bidirectional variants.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gemma4::impl::cuda {

enum class AttentionDtype { kBFloat16, kFloat16 };

struct AttentionShape {
  int batch = 0, seq = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  int left = 0, right = 0;
};

struct AttentionForwardArgs {
  AttentionShape shape;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const int32_t* key_valid = nullptr;
  void* o = nullptr;
  float* lse = nullptr;             // log-sum-exp of each query row; +inf for a row that sees no key (its o is 0)
  int32_t* tile_counter = nullptr;  // one int, zero on entry: the persistent forward's work queue
};

struct AttentionBackwardArgs {
  AttentionShape shape;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const int32_t* key_valid = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  const float* delta = nullptr;  // rowsum(dout * o) in fp32
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
};

// Head dims the kernels are built for; the op pads smaller head dims up to the next one.
bool attention_head_dim_supported(int head_dim);

// Both return "" on success, else what went wrong (an unsupported shape or a CUDA error).
const char* launch_attention_forward(AttentionDtype dtype, const AttentionForwardArgs& args, cudaStream_t stream);
// The backward writes dK and dV from a key-major pass and dQ from a query-major one, each element
// once: no sum in memory, no workspace, bitwise-reproducible (hopper_attention_backward.cu).
// delta = rowsum(dout * o) in fp32, [B, Hq, S], from o and dout [B, S, Hq, D]: the backward's row term.
const char* launch_attention_delta(AttentionDtype dtype, const AttentionShape& shape, const void* o, const void* dout,
                                   float* delta, cudaStream_t stream);
const char* launch_attention_backward(AttentionDtype dtype, const AttentionBackwardArgs& args, cudaStream_t stream);

}  // namespace gemma4::impl::cuda
