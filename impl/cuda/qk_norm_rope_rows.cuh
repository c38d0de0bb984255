#pragma once
// How the fused RMSNorm + RoPE kernels (qk_norm_rope_kernels.cu, qk_norm_rope_staged.cuh) walk
// their rows: which lanes hold which elements of which (token, head) row, the per-token RoPE
// entries, and the forward's arithmetic on one row, which the register-loaded and the staged
// kernels share. The design, and why, is explained at the top of qk_norm_rope_kernels.cu.
#include <algorithm>
#include <cstdint>

#include "impl/cuda/elementwise_kernels.h"

namespace gemma4::impl::cuda::norm_rope {

using namespace kernels;

constexpr int kWarps = 4;                     // warps per block (measured a little faster than 8)
constexpr int kPairsPerLane = 8;              // at most, in each half of a row: one 16-byte bf16 vector
constexpr int64_t kMaxBackwardBlocks = 1024;  // a backward launch's blocks: its workspace's partial-sum rows

// A lane's chunks of V pairs, at most.
template <int V>
constexpr int kChunks = kPairsPerLane / V;

// The fewest lanes (a power of two, at most 32) that hold the D/2 pairs of a row with at most
// kPairsPerLane each; 32 lanes hold D = 512.
__host__ __device__ inline int lanes_per_row(int64_t half) {
  int lanes = 1;
  while (lanes < 32 && lanes * kPairsPerLane < half) lanes *= 2;
  return lanes;
}

// The sum over the aligned group of `lanes` lanes that shares a row.
__device__ inline float group_sum(float v, int lanes) {
  for (int offset = lanes / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__host__ __device__ inline int64_t num_tokens(const RowShape& s) { return s.batch * s.seq; }

// Blocks that give each warp one token.
inline int64_t token_blocks(const RowShape& shape) { return (num_tokens(shape) + kWarps - 1) / kWarps; }

// The backward strides over the tokens with at most kMaxBackwardBlocks blocks, a number that
// depends on the shape alone, so that its per-block weight-gradient sums (and their order) do too.
inline int64_t backward_blocks(const RowShape& shape) { return std::min(token_blocks(shape), kMaxBackwardBlocks); }

// A lane's place: its warp takes tokens from `first` in steps of `stride`, and of each token the
// heads slot, slot + rows_per_warp, ...; the lane works on chunks c = sub, sub + lanes, ...
struct LanePlace {
  int lanes, rows_per_warp, slot, sub;
  int64_t first, stride;

  __device__ explicit LanePlace(int64_t half) : lanes(lanes_per_row(half)) {
    const int lane = threadIdx.x % 32;
    rows_per_warp = 32 / lanes;
    slot = lane / lanes;
    sub = lane % lanes;
    first = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
    stride = int64_t{gridDim.x} * kWarps;
  }
};

// Element offsets of row (token, head): in x [B, S, H, D], in the output layout, and of the
// token's position in the [S, D] RoPE table.
struct RowOffsets {
  int64_t in, out, rope;
};

// The index math is 32-bit (the caller keeps the rows below 2^32): 64-bit division is slow on
// the GPU and would cost as much as the row's arithmetic.
__device__ inline RowOffsets row_offsets(int64_t token, int64_t head, const RowShape& shape, bool transposed) {
  const uint32_t t = static_cast<uint32_t>(token), S = static_cast<uint32_t>(shape.seq);
  const uint32_t s = t % S, b = t / S;
  const int64_t row = token * shape.heads + head;
  const int64_t out_row = transposed ? (int64_t{b} * shape.heads + head) * S + s : row;
  return {row * shape.head_dim, out_row * shape.head_dim, int64_t{s} * shape.head_dim};
}

template <typename W, int V>
__device__ inline void load_weight(const W* weight, int64_t d, float (&out)[V]) {
  if (weight) {
    load<W, V>(weight + d, out);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = 1.f;
  }
}

// A lane's share of a row: chunks c = sub, sub + lanes, ... of V pairs, lo[i][j] for element
// d = c * V + j and hi[i][j] for d + D/2.
template <int V>
using Pairs = float[kChunks<V>][V];

// Where forward_row finds the norm weight of chunk i (elements d = c * V ... and d + D/2): read
// from memory each time (WeightRead), or held in registers (HeldWeight), which the staged kernel
// loads once per tensor instead of once a row, at the cost of 16 registers.
template <typename W, int V>
struct WeightRead {
  const W* weight;
  int64_t half;
  __device__ void at(int /*i*/, int64_t d, float (&lo)[V], float (&hi)[V]) const {
    load_weight<W, V>(weight, d, lo);
    load_weight<W, V>(weight, half + d, hi);
  }
};

template <int V>
struct HeldWeight {
  Pairs<V> lo, hi;
  HeldWeight() = default;
  template <typename W>
  __device__ HeldWeight(const WeightRead<W, V>& read, const LanePlace& lane, int chunks) {
#pragma unroll
    for (int i = 0; i < kChunks<V>; ++i) {
      const int c = lane.sub + lane.lanes * i;
      if (c < chunks) read.at(i, c * V, lo[i], hi[i]);
    }
  }
  __device__ void at(int i, int64_t /*d*/, float (&l)[V], float (&h)[V]) const {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      l[j] = lo[i][j];
      h[j] = hi[i][j];
    }
  }
};

// The RoPE table entries of the lane's chunks at one position: cos/sin of elements d (lo) and
// d + D/2 (hi), loaded once per token.
template <typename T, int V>
struct RopeRow {
  Pairs<V> cos_lo, cos_hi, sin_lo, sin_hi;
  __device__ RopeRow(const T* cos, const T* sin, int64_t at, int64_t half, const LanePlace& lane, int chunks) {
#pragma unroll
    for (int i = 0; i < kChunks<V>; ++i) {
      const int c = lane.sub + lane.lanes * i;
      if (!cos || c >= chunks) continue;
      load<T, V>(cos + at + c * V, cos_lo[i]);
      load<T, V>(cos + at + half + c * V, cos_hi[i]);
      load<T, V>(sin + at + c * V, sin_lo[i]);
      load<T, V>(sin + at + half + c * V, sin_hi[i]);
    }
  }
};

// The RoPE table's row of a token: [S, D] at its position, or [B, S, D] at the token itself.
__device__ inline int64_t rope_offset(int64_t token, const RowShape& shape, bool per_token_rope) {
  return per_token_rope ? token * shape.head_dim : row_offsets(token, 0, shape, false).rope;
}

// Calls row(rope, at, valid) for every (token, head) row this lane takes part in: the lane's warp
// takes one token at a time and all its heads, so the token's RoPE entries are loaded once for
// them. The loops are uniform over the warp, as the shuffles in `row` need; `valid` says whether
// the lane's row slot holds a head, to guard its memory accesses.
// With per_token_rope the table is [B, S, D], one row per token (b * S + s), so a batch row's own
// positions; otherwise [S, D], row s for every batch row.
template <typename T, int V, typename Row>
__device__ inline void for_each_row(const RowShape& shape, const LanePlace& lane, const T* cos, const T* sin,
                                    bool transposed, bool per_token_rope, int chunks, const Row& row) {
  const int64_t half = shape.head_dim / 2, tokens = num_tokens(shape);
  for (int64_t token = lane.first; token < tokens; token += lane.stride) {
    const RopeRow<T, V> rope(cos, sin, rope_offset(token, shape, per_token_rope), half, lane, chunks);
    for (int64_t head0 = 0; head0 < shape.heads; head0 += lane.rows_per_warp) {
      const int64_t head = head0 + lane.slot;
      row(rope, row_offsets(token, head, shape, transposed), head < shape.heads);
    }
  }
}

// One (token, head) row of the forward: x's row at x + at.in (global memory, or the staged
// kernel's shared copy), its outputs at at.out.
template <typename T, int V, typename Weight>
__device__ inline void forward_row(const NormRopeForwardArgs& a, int64_t D, int chunks, const LanePlace& lane,
                                   const T* x, const Weight& weight, const RopeRow<T, V>& rope, const RowOffsets& at,
                                   bool valid) {
  constexpr int C = kChunks<V>;
  const bool cos = a.cos != nullptr;
  T* y = static_cast<T*>(a.y);
  T* y_unscaled = static_cast<T*>(a.y_unscaled);
  const int64_t half = D / 2;
  Pairs<V> lo, hi;
  float sum_sq = 0.f;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = lane.sub + lane.lanes * i;
    if (!valid || c >= chunks) continue;
    load<T, V>(x + at.in + c * V, lo[i]);
    load<T, V>(x + at.in + half + c * V, hi[i]);
#pragma unroll
    for (int j = 0; j < V; ++j) sum_sq += lo[i][j] * lo[i][j] + hi[i][j] * hi[i][j];
  }
  const float rstd = rsqrtf(group_sum(sum_sq, lane.lanes) / static_cast<float>(D) + a.eps);

#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = lane.sub + lane.lanes * i;
    if (!valid || c >= chunks) continue;
    const int64_t d = c * V;
    float w_lo[V], w_hi[V];
    weight.at(i, d, w_lo, w_hi);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      lo[i][j] *= rstd;
      hi[i][j] *= rstd;
    }
    if (y_unscaled) {
      store<T, V>(y_unscaled + at.out + d, lo[i]);
      store<T, V>(y_unscaled + at.out + half + d, hi[i]);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      lo[i][j] *= w_lo[j];
      hi[i][j] *= w_hi[j];
    }
    if (cos) {
      // n*cos + rotate_half(n)*sin with rotate_half(n) = cat(-n[D/2:], n[:D/2]).
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float l = lo[i][j], h = hi[i][j];
        lo[i][j] = l * rope.cos_lo[i][j] - h * rope.sin_lo[i][j];
        hi[i][j] = h * rope.cos_hi[i][j] + l * rope.sin_hi[i][j];
      }
    }
    store<T, V>(y + at.out + d, lo[i]);
    store<T, V>(y + at.out + half + d, hi[i]);
  }
}

}  // namespace gemma4::impl::cuda::norm_rope
