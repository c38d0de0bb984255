#pragma once
// What the forward and backward attention kernels share: the band mask, the tile ranges it
// implies (tiles wholly outside it are never visited: work grows as S * window, not S^2), the
// shared-memory budget, and dispatch on dtype and head dim.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "impl/cuda/attention_kernels.h"
#include "impl/cuda/attention_tile.cuh"

namespace gemma4::impl::cuda {

// sm_90's largest dynamic shared memory per block (227 KiB).
constexpr int kMaxSharedBytes = 232448;

// May query i see key j? (the band of attention_kernels.h, plus padding and the sequence end)
__device__ inline bool allowed(const AttentionShape& s, const int32_t* key_valid_row, int i, int j) {
  return j >= i - s.left && j <= i + s.right && i < s.seq && j < s.seq && (key_valid_row == nullptr || key_valid_row[j]);
}

// Rows [r0, r0 + rows) against columns [c0, c0 + cols): true when every pair is inside the band
// and nothing is padding or past the end, so the tile needs no mask at all. `rows_are_queries`
// says which side the queries are on.
__device__ inline bool tile_unmasked(const AttentionShape& s, const int32_t* key_valid_row, int r0, int rows, int c0,
                                     int cols, bool rows_are_queries) {
  if (key_valid_row != nullptr || r0 + rows > s.seq || c0 + cols > s.seq) return false;
  const int q0 = rows_are_queries ? r0 : c0, nq = rows_are_queries ? rows : cols;
  const int k0 = rows_are_queries ? c0 : r0, nk = rows_are_queries ? cols : rows;
  return k0 >= (q0 + nq - 1) - s.left && k0 + nk - 1 <= q0 + s.right;
}

// Tiles of `tile` columns that intersect the band of rows [r0, r0 + rows): [first, last].
// For query rows the columns are keys j in [i - left, i + right]; for key rows they are queries
// i in [j - right, j + left].
struct TileRange {
  int first, last;
};
__device__ inline TileRange band_tiles(const AttentionShape& s, int r0, int rows, int tile, bool rows_are_queries) {
  const int r1 = min(r0 + rows, s.seq) - 1;
  const int below = rows_are_queries ? s.left : s.right, above = rows_are_queries ? s.right : s.left;
  const int lo = max(0, r0 - below), hi = min(s.seq - 1, r1 + above);
  return {lo / tile, hi / tile};
}

template <typename T, int D>
constexpr int tile_bytes(int rows) {
  return rows * (D + tile::kPad) * static_cast<int>(sizeof(T));
}

// Calls f(T{}, std::integral_constant<int, D>{}) for the dtype and kernel head dim; false if D is
// not built.
template <typename F>
bool dispatch(AttentionDtype dtype, int head_dim, F&& f) {
  auto with_dim = [&](auto type_tag) {
    switch (head_dim) {
      case 64: f(type_tag, std::integral_constant<int, 64>{}); return true;
      case 256: f(type_tag, std::integral_constant<int, 256>{}); return true;
      case 512: f(type_tag, std::integral_constant<int, 512>{}); return true;
      default: return false;
    }
  };
  return dtype == AttentionDtype::kBFloat16 ? with_dim(__nv_bfloat16{}) : with_dim(__half{});
}

// The two-pass backward (deterministic by construction): dK and dV of head dim 512 on wgmma
// (hopper_attention_dkdv512.cu), and dQ in its own query-major pass (hopper_attention_dq.cu).
const char* launch_attention_dkdv_512(AttentionDtype dtype, const AttentionBackwardArgs& args, cudaStream_t stream);
const char* launch_attention_dq(AttentionDtype dtype, const AttentionBackwardArgs& args, cudaStream_t stream);

inline const char* cuda_status(const char* unsupported_message) {
  if (unsupported_message != nullptr) return unsupported_message;
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace gemma4::impl::cuda
