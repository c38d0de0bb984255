#pragma once
// The backward of the fused RMSNorm + RoPE (launched by qk_norm_rope_kernels.cu): the register
// kernel, a warp a token as in the forward's register kernel, for a layer's q, k and v in one
// launch (block (x, y) works on job y), the norm weights' gradients finished in that launch too.
//
// dweight is a sum over all rows. Each block sums its rows' share into its own fp32 row of the
// workspace, in a fixed order; the blocks' rows are then summed in a fixed tree, whatever order the
// blocks finish in: the last block of each group of kGroupBlocks consecutive blocks to finish (a
// counter per group) sums the group's rows in block order into a group row, and the last group to
// finish sums the group rows in group order into dweight, rounded once to the weight's dtype. The
// gradient is bitwise-reproducible (cuda-deterministic relies on it), the counters are the only
// atomics, and no reduction or conversion launch follows the kernel.
// Two levels rather than one last block summing every row: that block would read blocks x D fp32
// alone after the other blocks end, up to 1024 x 512 x 4 = 2 MB (a tail of 10-20 us at an SM's
// 100-200 GB/s from L2: an estimate, not measured), where a level here reads at most 32 rows
// (64 KB) and only the last group's two levels are a tail.
#include <cstdint>
#include <type_traits>

#include "impl/cuda/qk_norm_rope_rows.cuh"

namespace gemma4::impl::cuda::norm_rope {

constexpr int kGroupBlocks = 32;
static_assert(kMaxBackwardBlocks <= int64_t{kGroupBlocks} * kGroupBlocks,
              "at most kGroupBlocks groups: the last level sums no more rows than a group's");

__host__ __device__ inline int64_t dweight_groups(int64_t blocks) {
  return (blocks + kGroupBlocks - 1) / kGroupBlocks;
}

// One job of a backward launch and, with a weight gradient (args.dweight), its part of the
// workspace: `rows`, [blocks + dweight_groups(blocks), D] fp32 (the blocks' rows, then the groups'),
// and `counters`, dweight_groups(blocks) + 1 of them (the groups', then the last level's), zero
// at the launch.
struct BackwardJob {
  RowShape shape;
  NormRopeBackwardArgs args;
  float* rows;
  unsigned* counters;
};

// A launch's jobs: one dtype, weight type, vector width, head dim and token count, so one
// gridDim.x (backward_blocks) serves them all.
struct BackwardLaunch {
  BackwardJob job[kMaxNormRopeJobs];
};

// Whether this block is the last of `expected` to arrive at `counter`. Every thread's writes
// before the call are visible to the last block's reads (__ldcg, from L2) after it.
__device__ inline bool last_to_arrive(unsigned* counter, unsigned expected) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == expected - 1;
    __threadfence();
  }
  __syncthreads();
  return last;
}

// out[d] = the sum over r = 0 .. count - 1 (at most kGroupBlocks) of rows[r * D + d], in that
// order, in fp32, rounded once to Out. The rows are loaded before the sums so that a thread has
// all its loads in flight at once. D is even (RoPE's pairs), so pairs of floats are 8-byte aligned.
template <typename Out>
__device__ inline void sum_rows(const float* rows, int count, int64_t D, Out* out) {
  const int64_t pairs = D / 2;
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    float2 v[kGroupBlocks];
#pragma unroll
    for (int r = 0; r < kGroupBlocks; ++r)
      v[r] = r < count ? __ldcg(reinterpret_cast<const float2*>(rows + r * D) + p) : make_float2(0.f, 0.f);
    float lo = 0.f, hi = 0.f;
#pragma unroll
    for (int r = 0; r < kGroupBlocks; ++r) {
      lo += v[r].x;
      hi += v[r].y;
    }
    out[2 * p] = from_float<Out>(lo);
    out[2 * p + 1] = from_float<Out>(hi);
  }
}

// After this block's row of job.rows is written: the levels above it that this block is the last
// to reach (see the top of the file).
template <typename W>
__device__ inline void finish_dweight(const BackwardJob& job, int64_t D) {
  const int blocks = gridDim.x, group = blockIdx.x / kGroupBlocks, first = group * kGroupBlocks;
  const int groups = static_cast<int>(dweight_groups(blocks));
  const int in_group = blocks - first < kGroupBlocks ? blocks - first : kGroupBlocks;
  float* group_rows = job.rows + int64_t{blocks} * D;
  if (!last_to_arrive(job.counters + group, in_group)) return;
  sum_rows<float>(job.rows + int64_t{first} * D, in_group, D, group_rows + int64_t{group} * D);
  if (!last_to_arrive(job.counters + groups, groups)) return;
  sum_rows<W>(group_rows, groups, D, static_cast<W*>(job.args.dweight));
}

// The blocks an SM asked of ptxas. The kernel is bound by the loads an SM has in flight
// (qk_norm_rope_kernels.cu), so warps an SM count. Reading its job's arguments by blockIdx.y costs
// registers: left free, ptxas (nvcc 13.0) gives the common instance, 2-byte rows and weights in
// 16-byte vectors, 152 registers (3 blocks, 12 warps, an SM) where the one-job kernel it replaces
// had 128 (4 blocks); held to 128, it spills 16 bytes, 3 loads from L1 a row (ptxas -v; that the
// warps gain more than the spills cost is an estimate, not measured). The other instances are left
// to ptxas (0: no minimum), as before.
template <typename T, typename W, int V>
constexpr int kBackwardMinBlocks = sizeof(T) == 2 && std::is_same_v<W, T> && V == 8 ? 4 : 0;

// With xhat = x * rstd, n = xhat * w and y = rope(n):
//   dn = rope^T(dy)                                 (the rotation transposed)
//   g = dn * w (+ dy_unscaled on K=V)               (the gradient w.r.t. xhat)
//   dx = rstd * (g - xhat * mean(g * xhat))
//   dw = sum over rows of dn * xhat
template <typename T, typename W, int V>
__global__ void __launch_bounds__(kWarps * 32, kBackwardMinBlocks<T, W, V>)
    norm_rope_backward_kernel(const __grid_constant__ BackwardLaunch launch) {
  constexpr int C = kChunks<V>;
  const BackwardJob& job = launch.job[blockIdx.y];
  const RowShape shape = job.shape;
  const NormRopeBackwardArgs a = job.args;
  const T* x = static_cast<const T*>(a.x);
  const W* weight = static_cast<const W*>(a.weight);
  const T* cos = static_cast<const T*>(a.cos);
  const T* sin = static_cast<const T*>(a.sin);
  const T* dy = static_cast<const T*>(a.dy);
  const T* dy_unscaled = static_cast<const T*>(a.dy_unscaled);
  T* dx = static_cast<T*>(a.dx);
  const int64_t D = shape.head_dim, half = D / 2;
  const int chunks = static_cast<int>(half / V);
  const LanePlace lane(half);

  Pairs<V> dw_lo = {}, dw_hi = {};  // this lane's share of dw over its rows
  auto row = [&](const RopeRow<T, V>& rope, const RowOffsets& at, bool valid) {
    // Everything that does not depend on rstd comes before the reduction: all loads overlap.
    Pairs<V> lo, hi, g_lo, g_hi, u_lo = {}, u_hi = {};  // x; dn, then g; dy_unscaled
    float sum_sq = 0.f;
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int c = lane.sub + lane.lanes * i;
      if (!valid || c >= chunks) continue;
      const int64_t d = c * V;
      load<T, V>(x + at.in + d, lo[i]);
      load<T, V>(x + at.in + half + d, hi[i]);
      load<T, V>(dy + at.out + d, g_lo[i]);
      load<T, V>(dy + at.out + half + d, g_hi[i]);
      if (dy_unscaled) {
        load<T, V>(dy_unscaled + at.out + d, u_lo[i]);
        load<T, V>(dy_unscaled + at.out + half + d, u_hi[i]);
      }
      if (cos) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float l = g_lo[i][j], h = g_hi[i][j];
          g_lo[i][j] = l * rope.cos_lo[i][j] + h * rope.sin_hi[i][j];
          g_hi[i][j] = h * rope.cos_hi[i][j] - l * rope.sin_lo[i][j];
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) sum_sq += lo[i][j] * lo[i][j] + hi[i][j] * hi[i][j];
    }
    const float rstd = rsqrtf(group_sum(sum_sq, lane.lanes) / static_cast<float>(D) + a.eps);

    float dot = 0.f;  // sum of g * xhat over the lane's share of the row
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int c = lane.sub + lane.lanes * i;
      if (!valid || c >= chunks) continue;
      float w_lo[V], w_hi[V];
      load_weight<W, V>(weight, c * V, w_lo);
      load_weight<W, V>(weight, half + c * V, w_hi);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        lo[i][j] *= rstd;
        hi[i][j] *= rstd;
        dw_lo[i][j] += g_lo[i][j] * lo[i][j];
        dw_hi[i][j] += g_hi[i][j] * hi[i][j];
        g_lo[i][j] = g_lo[i][j] * w_lo[j] + u_lo[i][j];
        g_hi[i][j] = g_hi[i][j] * w_hi[j] + u_hi[i][j];
        dot += g_lo[i][j] * lo[i][j] + g_hi[i][j] * hi[i][j];
      }
    }
    const float mean_dot = group_sum(dot, lane.lanes) / static_cast<float>(D);

#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int c = lane.sub + lane.lanes * i;
      if (!valid || c >= chunks) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        g_lo[i][j] = rstd * (g_lo[i][j] - lo[i][j] * mean_dot);
        g_hi[i][j] = rstd * (g_hi[i][j] - hi[i][j] * mean_dot);
      }
      store<T, V>(dx + at.in + c * V, g_lo[i]);
      store<T, V>(dx + at.in + half + c * V, g_hi[i]);
    }
  };
  for_each_row<T, V>(shape, lane, cos, sin, a.transposed, a.per_token_rope, chunks, row);

  if (!a.dweight) return;
  // dw summed in a fixed order: over the warp's row slots (shuffles), then over the block's warps
  // (shared memory) into this block's row of job.rows, then over the blocks (finish_dweight).
  extern __shared__ float block_dw[];  // [kWarps, D]
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = lane.sub + lane.lanes * i;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      for (int offset = lane.lanes; offset < 32; offset <<= 1) {
        dw_lo[i][j] += __shfl_xor_sync(0xffffffffu, dw_lo[i][j], offset);
        dw_hi[i][j] += __shfl_xor_sync(0xffffffffu, dw_hi[i][j], offset);
      }
      if (lane.slot == 0 && c < chunks) {
        block_dw[warp * D + c * V + j] = dw_lo[i][j];
        block_dw[warp * D + half + c * V + j] = dw_hi[i][j];
      }
    }
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w) sum += block_dw[w * D + d];
    job.rows[blockIdx.x * D + d] = sum;
  }
  finish_dweight<W>(job, D);
}

}  // namespace gemma4::impl::cuda::norm_rope
