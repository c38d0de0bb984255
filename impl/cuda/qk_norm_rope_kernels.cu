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
// a thread) is 16 KB: the register kernel's backward reaches 71-84% of the copy ceiling at 8k
// tokens (bench/README.md, the baseline set). Neither holding more rows in registers (more
// registers than it gains; the next row's raw x loaded ahead of the current row's work: 2-8% slower
// on the H100) nor asking L2 for the rows ahead
// (prefetch.global.L2: 6.4% slower at the H100's global shape) helped; all are described there.
// What did: the forward's staged kernel (qk_norm_rope_staged.cuh), where TMA bulk copies bring a
// warp's next units into shared memory, 8 KB in flight a warp and 96 KB an SM, and one launch
// serves a layer's q, k and v: 87-91% of copy from 8k tokens on the H100 and the H200, 60-76% at
// 1k (bench/README.md). It serves bf16 and f16 rows whose pointers allow 16-byte vectors; the
// register-loaded kernel serves the rest (fp32, other head dims or alignments) and the backward.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "impl/cuda/device_setup.h"
#include "impl/cuda/elementwise_kernels.h"
#include "impl/cuda/qk_norm_rope_rows.cuh"
#include "impl/cuda/qk_norm_rope_staged.cuh"

namespace gemma4::impl::cuda {
namespace {

using namespace kernels;
using namespace norm_rope;

template <typename T, typename W, int V>
__global__ void __launch_bounds__(kWarps * 32) norm_rope_forward_kernel(RowShape shape, NormRopeForwardArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* cos = static_cast<const T*>(a.cos);
  const T* sin = static_cast<const T*>(a.sin);
  const int64_t D = shape.head_dim, half = D / 2;
  const int chunks = static_cast<int>(half / V);
  const LanePlace lane(half);
  auto row = [&](const RopeRow<T, V>& rope, const RowOffsets& at, bool valid) {
    // The weight read each row: held (HeldWeight), its 16 registers would cost the V = 1 instances
    // a block an SM.
    const WeightRead<W, V> weight{static_cast<const W*>(a.weight), half};
    forward_row<T, V>(a, D, chunks, lane, x, weight, rope, at, valid);
  };
  for_each_row<T, V>(shape, lane, cos, sin, a.transposed, a.per_token_rope, chunks, row);
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

// Whether the staged kernel takes a job, its weight read as W: 16-byte vectors of the rows, tables
// and outputs, and cos and sin rows that fit a stage.
template <typename T, typename W>
bool stageable(const NormRopeForwardJob& job) {
  const NormRopeForwardArgs& a = job.args;
  const int64_t D = job.shape.head_dim;
  const bool weight_read_as_w = a.weight == nullptr || a.weight_fp32 == std::is_same_v<W, float>;
  return weight_read_as_w && 2 * D * int64_t(sizeof(T)) <= kRopeBytes &&
         vector_width<T>(D / 2, a.weight, sizeof(W), {a.x, a.cos, a.sin, a.y, a.y_unscaled}) == 8;
}

// The jobs the staged kernel takes, in one launch; launched[i] set for them (and for jobs with no
// rows).
template <typename T, typename W>
void launch_staged(const NormRopeForwardJob* jobs, int count, bool* launched, cudaStream_t stream) {
  StagedLaunch launch{};
  for (int i = 0; i < count; ++i) {
    const NormRopeForwardJob& job = jobs[i];
    if (num_tokens(job.shape) * job.shape.heads == 0) {
      launched[i] = true;  // nothing to do
      continue;
    }
    if (!stageable<T, W>(job) || (launch.jobs > 0 && job.shape.head_dim != launch.head_dim)) continue;
    launch.add(job.shape, job.args, sizeof(T));
    launched[i] = true;
  }
  if (launch.jobs == 0) return;
  // At most one wave; the warps walk the units.
  constexpr auto kernel = norm_rope_forward_staged_kernel<T, W, 8>;
  int device = 0;
  cudaGetDevice(&device);
  const int64_t wave = int64_t(device_facts(device).sms) * resident_blocks<kernel, kWarps * 32, kStagedShared>(device);
  const int64_t blocks = std::min((launch.count + kWarps - 1) / kWarps, wave);
  launch.set_blocks(blocks);
  kernel<<<blocks, kWarps * 32, kStagedShared, stream>>>(launch);
}

void launch_registers(DType dtype, const NormRopeForwardJob& job, cudaStream_t stream) {
  const int64_t blocks = token_blocks(job.shape);
  if (blocks == 0) return;
  const NormRopeForwardArgs& args = job.args;
  with_types(dtype, args.weight_fp32, job.shape.head_dim / 2, args.weight,
             {args.x, args.cos, args.sin, args.y, args.y_unscaled}, [&](auto t, auto w, auto v) {
               norm_rope_forward_kernel<decltype(t), decltype(w), decltype(v)::value>
                   <<<blocks, kWarps * 32, 0, stream>>>(job.shape, args);
             });
}

}  // namespace

int64_t norm_rope_backward_blocks(const RowShape& shape) { return backward_blocks(shape); }

cudaError_t norm_rope_forward(DType dtype, const NormRopeForwardJob* jobs, int count, cudaStream_t stream) {
  bool launched[kMaxNormRopeJobs] = {};
  with_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    if constexpr (sizeof(T) == 2) {
      // The staged launch reads every weight as the first weighted job's is read (the jobs' weights
      // share a dtype in a model); a job whose weight differs is left to the register kernel.
      const NormRopeForwardJob* weighted = std::find_if(jobs, jobs + count, [](const NormRopeForwardJob& job) {
        return job.args.weight != nullptr;
      });
      if (weighted != jobs + count && weighted->args.weight_fp32) {
        launch_staged<T, float>(jobs, count, launched, stream);
      } else {
        launch_staged<T, T>(jobs, count, launched, stream);
      }
    }
  });
  for (int i = 0; i < count; ++i)
    if (!launched[i]) launch_registers(dtype, jobs[i], stream);
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
