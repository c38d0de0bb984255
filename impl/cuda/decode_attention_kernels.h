#pragma once
// The decode attention kernel's launch interface (decode_attention.cu): a few queries of one step
// against a long K/V cache, split over the cache's length (flash-decoding). Plain pointers and
// sizes, no LibTorch; impl/cuda/kv_cache_op.cpp is the LibTorch side.
//
// Layouts (B batch, c queries, Hq query heads, Hkv kv heads, D head dim):
//   q, out     [B, c, Hq, D]          the step's queries (token-major, as the decoder makes them)
//   k, v       [B, Hkv, rows, D]      the cache: token index j lives in row j % rows (a ring on
//                                     sliding layers; rows = capacity on global ones, so j itself)
//   padding    [B, padding_stride]    int64, 1 token / 0 padding, indexed by token index; or null
// Query i (token index start + q) sees key j when j <= i, i - j < window (window > 0), and j is a
// token: reference/ops.cpp index_attention_mask. Softmax scale 1, fp32.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "impl/cuda/attention_kernels.h"

namespace gemma4::impl::cuda {

// The kernel's bounds: queries per step, and rows per CTA = (query heads per kv head) x queries.
// Past them (a prefill chunk, many query heads per kv head) the op takes its fallback.
constexpr int kMaxDecodeQueries = 16;
constexpr int kMaxDecodeRows = 32;

struct DecodeAttentionArgs {
  int batch = 0, queries = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t rows = 0;       // cache rows per (batch, kv head)
  int64_t start = 0;      // token index of the first query
  int64_t window = 0;     // sliding window; 0: none
  int64_t first_key = 0;  // the oldest key index any query may see; the cache must still hold it
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const int64_t* padding = nullptr;
  int64_t padding_stride = 0;
  void* out = nullptr;
};

// How the cache's keys are split over CTAs; splits > 1 needs workspace_bytes of scratch (partial
// max, sum and output in fp32) and a second, combining kernel.
struct DecodePlan {
  int splits = 1;
  int tiles_per_split = 0;
  int stages = 3;  // the kernel's pipeline stages: 3 or 4 (plan_decode_attention says when)
  int prefetch = 0;  // key tiles a CTA prefetches into L2 beyond its stages
  size_t workspace_bytes = 0;
};

// Keys per tile (a pipeline stage): 8192 / head dim, 0 for a head dim not built.
inline int decode_tile_keys(int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512 ? 8192 / head_dim : 0;
}

// Head dims 64, 128, 256, 512; at most kMaxDecodeQueries queries and kMaxDecodeRows rows.
bool decode_attention_supported(int head_dim, int q_heads, int kv_heads, int queries);

// For the current device (its SM count and the kernel's occupancy there).
DecodePlan plan_decode_attention(AttentionDtype dtype, const DecodeAttentionArgs& args);

// "" on success, else what went wrong. `workspace`: plan.workspace_bytes (not zeroed), or null when 0.
const char* launch_decode_attention(AttentionDtype dtype, const DecodeAttentionArgs& args, const DecodePlan& plan,
                                    void* workspace, cudaStream_t stream);

}  // namespace gemma4::impl::cuda
