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
// a thread) is 16 KB: the register kernel's backward (then a launch a tensor) reaches 71-84% of
// the copy ceiling at 8k tokens (bench/README.md, the baseline set). Neither holding more rows in
// registers (more registers than it gains; the next row's raw x loaded ahead of the current row's
// work: 2-8% slower on the H100) nor asking L2 for the rows ahead
// (prefetch.global.L2: 6.4% slower at the H100's global shape) helped; all are described there.
// What did: the forward's staged kernel (qk_norm_rope_staged.cuh), where TMA bulk copies bring a
// warp's next units into shared memory, 8 KB in flight a warp and 96 KB an SM, and one launch
// serves a layer's q, k and v: 87-91% of copy from 8k tokens on the H100 and the H200, 60-76% at
// 1k (bench/README.md). It serves bf16 and f16 rows whose pointers allow 16-byte vectors; the
// register-loaded kernel serves the rest (fp32, other head dims or alignments) and the backward
// (qk_norm_rope_backward.cuh, also one launch a layer).
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "impl/cuda/device_setup.h"
#include "impl/cuda/elementwise_kernels.h"
#include "impl/cuda/qk_norm_rope_backward.cuh"
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

// Calls launch(T{}, W{}, integral_constant<V>) for the instance that runs a backward job.
template <typename Launch>
void with_backward_types(DType dtype, const NormRopeBackwardJob& job, Launch&& launch) {
  const NormRopeBackwardArgs& a = job.args;
  with_types(dtype, a.weight_fp32, job.shape.head_dim / 2, a.weight, {a.x, a.cos, a.sin, a.dy, a.dy_unscaled, a.dx},
             launch);
}

// What decides whether backward jobs can share a launch: the instance (W, by its size, and V), the
// head dim and the tokens (one gridDim.x). A job without a weight reads none, so it takes any W.
struct BackwardKind {
  bool weighted;
  int weight_bytes, width;
  int64_t head_dim, tokens;

  bool fits(const BackwardKind& o) const {
    return width == o.width && head_dim == o.head_dim && tokens == o.tokens &&
           (!weighted || !o.weighted || weight_bytes == o.weight_bytes);
  }
};

BackwardKind backward_kind(DType dtype, const NormRopeBackwardJob& job) {
  BackwardKind kind{job.args.weight != nullptr, 0, 0, job.shape.head_dim, num_tokens(job.shape)};
  with_backward_types(dtype, job, [&](auto, auto w, auto v) {
    kind.weight_bytes = sizeof(w);
    kind.width = decltype(v)::value;
  });
  return kind;
}

// Where the jobs' weight-gradient rows and counters (BackwardJob) lie in the workspace: all the
// jobs' rows, then all their counters, which one memset zeroes.
struct WorkspacePlan {
  int64_t rows_at[kMaxNormRopeJobs] = {}, counters_at[kMaxNormRopeJobs] = {};  // in floats, in counters
  int64_t floats = 0, counters = 0;

  WorkspacePlan(const NormRopeBackwardJob* jobs, int count) {
    for (int i = 0; i < count; ++i) {
      const int64_t blocks = backward_blocks(jobs[i].shape), groups = dweight_groups(blocks);
      if (!jobs[i].args.dweight || blocks == 0) continue;
      rows_at[i] = floats;
      counters_at[i] = counters;
      floats += (blocks + groups) * jobs[i].shape.head_dim;
      counters += groups + 1;
    }
  }
  size_t bytes() const { return floats * sizeof(float) + counters * sizeof(unsigned); }
};

}  // namespace

size_t norm_rope_backward_workspace(const NormRopeBackwardJob* jobs, int count) {
  return WorkspacePlan(jobs, count).bytes();
}

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

cudaError_t norm_rope_backward(DType dtype, const NormRopeBackwardJob* jobs, int count, void* workspace,
                               cudaStream_t stream) {
  const WorkspacePlan plan(jobs, count);
  float* rows = static_cast<float*>(workspace);
  unsigned* counters = reinterpret_cast<unsigned*>(rows + plan.floats);
  // The counters are zeroed before the launch rather than reset by the blocks that finish with
  // them: the workspace comes from the caching allocator each call (no state is kept between
  // calls), so it starts undefined either way, and a reset would only serve a workspace kept.
  if (plan.counters > 0) {
    const cudaError_t error = cudaMemsetAsync(counters, 0, plan.counters * sizeof(unsigned), stream);
    if (error != cudaSuccess) return error;
  }
  BackwardKind kinds[kMaxNormRopeJobs];
  for (int i = 0; i < count; ++i) kinds[i] = backward_kind(dtype, jobs[i]);
  bool launched[kMaxNormRopeJobs] = {};
  for (int i = 0; i < count; ++i) {
    if (launched[i]) continue;
    const int64_t blocks = backward_blocks(jobs[i].shape);
    if (blocks == 0) {  // no tokens: a zero weight gradient
      const NormRopeBackwardArgs& a = jobs[i].args;
      if (a.dweight) cudaMemsetAsync(a.dweight, 0, jobs[i].shape.head_dim * kinds[i].weight_bytes, stream);
      continue;
    }
    // Job i and the later jobs that fit it, in one launch of the instance of its first job with a
    // weight (`like`; every job of the launch has its V, the weighted ones its W).
    BackwardKind kind = kinds[i];
    BackwardLaunch launch{};
    int jobs_in_launch = 0, like = i;
    bool weight_grad = false;
    for (int j = i; j < count; ++j) {
      if (launched[j] || !kind.fits(kinds[j])) continue;
      if (!kind.weighted && kinds[j].weighted) {
        kind = kinds[j];
        like = j;
      }
      const NormRopeBackwardJob& job = jobs[j];
      launch.job[jobs_in_launch++] = {job.shape, job.args, rows + plan.rows_at[j], counters + plan.counters_at[j]};
      weight_grad = weight_grad || job.args.dweight;
      launched[j] = true;
    }
    const size_t shared = weight_grad ? kWarps * kind.head_dim * sizeof(float) : 0;
    with_backward_types(dtype, jobs[like], [&](auto t, auto w, auto v) {
      norm_rope_backward_kernel<decltype(t), decltype(w), decltype(v)::value>
          <<<dim3(static_cast<unsigned>(blocks), jobs_in_launch), kWarps * 32, shared, stream>>>(launch);
    });
  }
  return cudaGetLastError();
}

}  // namespace gemma4::impl::cuda
