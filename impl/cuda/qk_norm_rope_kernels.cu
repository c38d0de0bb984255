// Fused RMSNorm + RoPE over (token, head) rows, forward and backward (GEMMA4.md, Forward 3 and 5):
// the q/k norms with RoPE, the unscaled v norm, and on K=V layers both k and v from one read of
// the raw key.
//
// RoPE pairs element d with d + D/2, so a lane holds whole pairs: chunks of V consecutive d (one
// vector access) in each half. A row of D <= 512 is shared by a group of lanes (a power of two, up
// to the whole warp: lanes_per_row), so a warp works on 32 / lanes rows (heads) at once. The row
// stays in registers between its sum of squares (a shuffle reduction within the group) and the
// output: every input element is read once, every output written once.
//
// A warp takes one token at a time and all of its heads: the token's cos/sin entries for the
// lane's chunks are loaded once into registers (4 x 8 floats at most) and serve every head, instead
// of being re-read per (token, head) row. With fewer heads than rows per warp (MQA keys at small
// head dims), the spare row slots idle.
//
// Bytes in flight. These kernels are bound by memory latency unless an SM keeps enough loads
// outstanding: an H200 SM's share of the bandwidth (4.8 TB/s / 132) over a loaded DRAM latency of
// about 1 us is about 36 KB, and a lane's one row (32 bytes; 16 warps an SM at 104-118 registers
// a thread) is 16 KB: 58-80% of the copy ceiling, measured (bench/README.md). Neither holding
// more rows in registers (more registers than it gains; the next row's raw x loaded ahead of the
// current row's work: 2-8% slower on the H100) nor asking L2 for the rows ahead
// (prefetch.global.L2: 6.4% slower at the H100's global shape) helped; all are described there.
// What did: the forward's staged kernel (below), where TMA bulk copies bring a warp's next units
// into shared memory, 8 KB in flight a warp and 96 KB an SM: 3-20% faster on the H100, 74-89% of
// copy from 4k tokens (bench/README.md). It serves bf16 and f16 rows whose pointers allow 16-byte
// vectors; the register-loaded kernel serves the rest (fp32, other head dims or alignments).
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "impl/cuda/elementwise_kernels.h"
#include "impl/cuda/qk_norm_rope_rows.cuh"

namespace gemma4::impl::cuda {
namespace {

using namespace kernels;
using namespace norm_rope;

// One (token, head) row of the forward: x's row at x + at.in (global memory, or the staged
// kernel's shared copy), its outputs at at.out.
template <typename T, typename W, int V>
__device__ inline void forward_row(const NormRopeForwardArgs& a, int64_t D, int chunks, const LanePlace& lane,
                                   const T* x, const RopeRow<T, V>& rope, const RowOffsets& at, bool valid) {
  constexpr int C = kChunks<V>;
  const W* weight = static_cast<const W*>(a.weight);
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
    load_weight<W, V>(weight, d, w_lo);
    load_weight<W, V>(weight, half + d, w_hi);
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

template <typename T, typename W, int V>
__global__ void __launch_bounds__(kWarps * 32) norm_rope_forward_kernel(RowShape shape, NormRopeForwardArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* cos = static_cast<const T*>(a.cos);
  const T* sin = static_cast<const T*>(a.sin);
  const int64_t D = shape.head_dim, half = D / 2;
  const int chunks = static_cast<int>(half / V);
  const LanePlace lane(half);
  auto row = [&](const RopeRow<T, V>& rope, const RowOffsets& at, bool valid) {
    forward_row<T, W, V>(a, D, chunks, lane, x, rope, at, valid);
  };
  for_each_row<T, V>(shape, lane, cos, sin, a.transposed, a.per_token_rope, chunks, row);
}

// The staged forward (2-byte dtypes, 16-byte vectors): the same rows, but x reaches the warp
// through shared memory. A unit is up to kStageBytes of one token's rows (16 heads at D 256, 8 at
// 512) with the token's cos and sin rows; each warp walks its units with kStages stages of its
// own, its lane 0 issuing one TMA bulk copy per piece (cp.async.bulk, completion counted in bytes
// on the stage's mbarrier). A warp thus has two units (8 KB) in flight while it works on a third,
// rather than the 1 KB of a register-loaded row, without registers to hold them: shared memory
// bounds the bytes in flight, 3 x 6 KB a warp, 72 KB a block, three blocks (12 warps) an SM. Units
// of 4 KB rather than 8 keep the last units of a launch short (a warp's share of 4k tokens is
// about 8 units of 8 KB, and the launch ends with its slowest warp).
constexpr int kStages = 3;
constexpr int kStageBytes = 4096;                         // x's rows of one unit
constexpr int kRopeBytes = 2 * 1024;                      // its cos and sin rows: D <= 512 (2 bytes)
constexpr int kStageStride = kStageBytes + kRopeBytes;
constexpr size_t kStagedShared = size_t(kWarps) * kStages * (kStageStride + sizeof(uint64_t));
constexpr int kStagedBlocksPerSm = 3;
static_assert(kStagedBlocksPerSm * (kStagedShared + 1024) <= 228 * 1024, "three blocks an SM (Hopper: 228 KB)");

// How a launch's rows fall into units, for the host's grid and the kernel alike: `rows` heads a
// unit (as many whole rows as fit kStageBytes, at most the token's), `per_token` units a token.
struct StagedUnits {
  struct Unit {
    int64_t token, h0;
    int n;  // rows (heads h0 .. h0 + n - 1)
  };
  int64_t heads, rows, per_token, count;
  __host__ __device__ StagedUnits(const RowShape& shape, int64_t row_bytes) : heads(shape.heads) {
    const int64_t fit = kStageBytes / row_bytes;
    rows = fit < 1 ? 1 : (fit < heads ? fit : heads);
    per_token = (heads + rows - 1) / rows;
    count = num_tokens(shape) * per_token;
  }
  __host__ __device__ Unit at(int64_t unit) const {
    const int64_t h0 = (unit % per_token) * rows;
    return {unit / per_token, h0, int(heads - h0 < rows ? heads - h0 : rows)};
  }
};

template <typename T, typename W, int V>
__global__ void __launch_bounds__(kWarps * 32) norm_rope_forward_staged_kernel(RowShape shape, NormRopeForwardArgs a) {
  static_assert(sizeof(T) == 2 && V * sizeof(T) == 16, "whole 16-byte vectors of a 2-byte type");
  extern __shared__ __align__(128) unsigned char staged[];
  const int warp = threadIdx.x / 32;
  const bool leader = threadIdx.x % 32 == 0;
  const int64_t D = shape.head_dim, half = D / 2, row_bytes = D * int64_t(sizeof(T));
  const int chunks = static_cast<int>(half / V);
  const LanePlace lane(half);
  const StagedUnits units(shape, row_bytes);
  unsigned char* stage0 = staged + warp * kStages * kStageStride;
  uint64_t* full = reinterpret_cast<uint64_t*>(staged + kWarps * kStages * kStageStride) + warp * kStages;
  const int64_t first = int64_t{blockIdx.x} * kWarps + warp, stride = int64_t{gridDim.x} * kWarps;
  const T* x = static_cast<const T*>(a.x);
  const T* cos = static_cast<const T*>(a.cos);
  const T* sin = static_cast<const T*>(a.sin);

  if (leader) {
    for (int s = 0; s < kStages; ++s) cutlass::arch::ClusterBarrier::init(&full[s], 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncwarp();
  auto issue = [&](int64_t unit, int s) {  // lane 0: unit's rows, cos and sin into stage s
    const StagedUnits::Unit u = units.at(unit);
    unsigned char* dst = stage0 + s * kStageStride;
    const int rope_bytes = cos ? int(row_bytes) : 0;
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full[s], uint32_t(u.n * row_bytes + 2 * rope_bytes));
    cute::SM90_BULK_COPY_G2S::copy(x + (u.token * shape.heads + u.h0) * D, &full[s], dst, int32_t(u.n * row_bytes));
    if (cos) {
      const int64_t r = rope_offset(u.token, shape, a.per_token_rope);
      cute::SM90_BULK_COPY_G2S::copy(cos + r, &full[s], dst + kStageBytes, rope_bytes);
      cute::SM90_BULK_COPY_G2S::copy(sin + r, &full[s], dst + kStageBytes + rope_bytes, rope_bytes);
    }
  };
  if (leader) {
    for (int s = 0; s < kStages; ++s)
      if (first + s * stride < units.count) issue(first + s * stride, s);
  }
  int k = 0;
  for (int64_t unit = first; unit < units.count; unit += stride, ++k) {
    const int s = k % kStages;
    cutlass::arch::ClusterBarrier::wait(&full[s], (k / kStages) & 1);
    const StagedUnits::Unit u = units.at(unit);
    const T* xs = reinterpret_cast<const T*>(stage0 + s * kStageStride);
    const T* cs = reinterpret_cast<const T*>(stage0 + s * kStageStride + kStageBytes);
    const RopeRow<T, V> rope(cos ? cs : nullptr, cs + D, 0, half, lane, chunks);
    for (int head0 = 0; head0 < u.n; head0 += lane.rows_per_warp) {
      const int head = head0 + lane.slot;
      RowOffsets at = row_offsets(u.token, u.h0 + head, shape, a.transposed);
      at.in = head * D;  // in the stage
      forward_row<T, W, V>(a, D, chunks, lane, xs, rope, at, head < u.n);
    }
    __syncwarp();  // every lane is done with stage s before it is refilled
    if (leader && unit + kStages * stride < units.count) issue(unit + kStages * stride, s);
  }
}

// With xhat = x * rstd, n = xhat * w and y = rope(n):
//   dn = rope^T(dy)                                 (the rotation transposed)
//   g = dn * w (+ dy_unscaled on K=V)               (the gradient w.r.t. xhat)
//   dx = rstd * (g - xhat * mean(g * xhat))
//   dw = sum over rows of dn * xhat
template <typename T, typename W, int V>
__global__ void __launch_bounds__(kWarps * 32) norm_rope_backward_kernel(RowShape shape, NormRopeBackwardArgs a) {
  constexpr int C = kChunks<V>;
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

  if (!a.dweight_partial) return;
  // dw summed in a fixed order: over the warp's row slots (shuffles), then over the block's warps
  // (shared memory) into this block's row of dweight_partial.
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
    a.dweight_partial[blockIdx.x * D + d] = sum;
  }
}

// The widest vector (in elements, at most 16 bytes) that divides D/2 and to which every pointer
// is aligned (the weight's in its own dtype).
template <typename T>
int vector_width(int64_t half, const void* weight, size_t weight_bytes, std::initializer_list<const void*> pointers) {
  for (int width = 16 / static_cast<int>(sizeof(T)); width > 1; width /= 2) {
    bool ok = half % width == 0 && aligned(weight, width * weight_bytes);
    for (const void* p : pointers) ok = ok && aligned(p, width * sizeof(T));
    if (ok) return width;
  }
  return 1;
}

// Calls launch(T{}, W{}, integral_constant<V>) for x's dtype T, the weight's W (fp32 or T) and the
// vector width.
template <typename Launch>
void with_types(DType dtype, bool weight_fp32, int64_t half, const void* weight,
                std::initializer_list<const void*> pointers, Launch&& launch) {
  with_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    auto with_weight = [&](auto weight_type) {
      using W = decltype(weight_type);
      with_width<T>(vector_width<T>(half, weight, sizeof(W), pointers), [&](auto v) { launch(T{}, W{}, v); });
    };
    if (weight_fp32 || std::is_same_v<T, float>) {
      with_weight(float{});
    } else {
      with_weight(T{});
    }
  });
}

}  // namespace

int64_t norm_rope_backward_blocks(const RowShape& shape) { return backward_blocks(shape); }

cudaError_t norm_rope_forward(DType dtype, const RowShape& shape, const NormRopeForwardArgs& args,
                              cudaStream_t stream) {
  const int64_t blocks = token_blocks(shape);
  if (blocks == 0) return cudaSuccess;
  with_types(dtype, args.weight_fp32, shape.head_dim / 2, args.weight,
             {args.x, args.cos, args.sin, args.y, args.y_unscaled}, [&](auto t, auto w, auto v) {
               using T = decltype(t);
               using W = decltype(w);
               constexpr int V = decltype(v)::value;
               if constexpr (sizeof(T) == 2 && V == 8) {
                 const int64_t row_bytes = shape.head_dim * int64_t(sizeof(T));
                 if (2 * row_bytes <= kRopeBytes) {  // the stage holds the cos and sin rows
                   // At most one wave of kStagedBlocksPerSm blocks an SM; the warps walk the units.
                   const int64_t unit_blocks = (StagedUnits(shape, row_bytes).count + kWarps - 1) / kWarps;
                   auto kernel = norm_rope_forward_staged_kernel<T, W, V>;
                   int device = 0, sms = 1;
                   cudaGetDevice(&device);
                   cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
                   cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kStagedShared));
                   kernel<<<std::min<int64_t>(unit_blocks, kStagedBlocksPerSm * int64_t(sms)), kWarps * 32, kStagedShared, stream>>>(shape, args);
                   return;
                 }
               }
               norm_rope_forward_kernel<T, W, V><<<blocks, kWarps * 32, 0, stream>>>(shape, args);
             });
  return cudaGetLastError();
}

cudaError_t norm_rope_backward(DType dtype, const RowShape& shape, const NormRopeBackwardArgs& args,
                               cudaStream_t stream) {
  const int64_t blocks = backward_blocks(shape);
  if (blocks == 0) return cudaSuccess;
  const size_t shared = args.dweight_partial ? kWarps * shape.head_dim * sizeof(float) : 0;
  with_types(dtype, args.weight_fp32, shape.head_dim / 2, args.weight,
             {args.x, args.cos, args.sin, args.dy, args.dy_unscaled, args.dx}, [&](auto t, auto w, auto v) {
               norm_rope_backward_kernel<decltype(t), decltype(w), decltype(v)::value>
                   <<<blocks, kWarps * 32, shared, stream>>>(shape, args);
             });
  return cudaGetLastError();
}

}  // namespace gemma4::impl::cuda
