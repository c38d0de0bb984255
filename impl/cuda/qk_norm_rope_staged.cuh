#pragma once
// The staged forward of the fused RMSNorm + RoPE (2-byte dtypes, 16-byte vectors): the rows of
// forward_row, but x reaches the warp through shared memory, and one launch serves a layer's q, k
// and v (its jobs). The register-loaded kernel (qk_norm_rope_kernels.cu) serves what this one
// cannot: fp32, other head dims or alignments.
//
// A unit is up to kStageBytes of one token's rows of one job (8 heads at D 256, 4 at 512) with the
// token's cos and sin rows. Each warp walks its units with kStages stages of its own, its lane 0
// issuing one TMA bulk copy per piece (cp.async.bulk, completion counted in bytes on the stage's
// mbarrier). A warp thus has two units (8 KB of rows) in flight while it works on a third, rather
// than the 1 KB of a register-loaded row, without registers to hold them: shared memory bounds the
// bytes in flight, 3 x 6 KB a warp, 72 KB a block, three blocks (12 warps) an SM. Units of 4 KB
// rather than 8 keep the last units of a launch short (a warp's share of 4k tokens is about 8
// units of 8 KB, and the launch ends with its slowest warp).
//
// The jobs' units are numbered one after another (q's, then k's, then v's), and the warps walk
// them all in one launch: a launch's start (the first units' DRAM latency) and its end (the
// slowest warp's last unit) are paid once a layer instead of once a tensor. A warp's walk steps from
// unit to unit by additions (UnitWalk), and its lanes hold the norm weight across units
// (HeldWeight): per unit, the integer and load work besides the rows' arithmetic is small.
#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "impl/cuda/qk_norm_rope_rows.cuh"

namespace gemma4::impl::cuda::norm_rope {

constexpr int kStages = 3;
constexpr int kStageBytes = 4096;     // x's rows of one unit
constexpr int kRopeBytes = 2 * 1024;  // its cos and sin rows: D <= 512 (2 bytes)
constexpr int kStageStride = kStageBytes + kRopeBytes;
constexpr int kStagedShared = kWarps * kStages * (kStageStride + int(sizeof(uint64_t)));
static_assert(3 * (kStagedShared + 1024) <= 228 * 1024, "three blocks an SM (Hopper: 228 KB)");

// How a job's rows fall into units: `rows` heads a unit (as many whole rows as fit kStageBytes,
// at most the token's), `per_token` units a token.
struct StagedUnits {
  int64_t heads, rows, per_token, count;
  StagedUnits() = default;
  __host__ __device__ StagedUnits(const RowShape& shape, int64_t row_bytes) : heads(shape.heads) {
    const int64_t fit = kStageBytes / row_bytes;
    rows = fit < 1 ? 1 : (fit < heads ? fit : heads);
    per_token = (heads + rows - 1) / rows;
    count = num_tokens(shape) * per_token;
  }
};

// One job of a launch: its rows and arguments, how its rows fall into units, where its units
// start among the launch's (`first`), and what a walk's step of `stride` units is in it
// (`step_tokens` tokens and `step_parts` units).
struct StagedJob {
  RowShape shape;
  NormRopeForwardArgs args;
  StagedUnits units;
  int64_t first, step_tokens, step_parts;
};

// One launch's jobs (one dtype, one head dim; heads > 0): job j's units are the launch's units
// job[j].first .. job[j].first + job[j].units.count - 1. A warp walks the units w, w + stride, ...
// (stride: the launch's warps, gridDim.x * kWarps, kept here so that the steps above are computed
// once, on the host).
struct StagedLaunch {
  static constexpr int kMaxJobs = 3;
  StagedJob job[kMaxJobs];
  int jobs;
  int64_t head_dim, count, stride;  // count: all jobs' units

  __host__ __device__ int job_of(int64_t unit) const {
    int j = 0;
    while (j + 1 < jobs && unit >= job[j + 1].first) ++j;
    return j;
  }
  // A job's units after the jobs already added (same head dim; elem_bytes: the dtype's size).
  __host__ void add(const RowShape& shape, const NormRopeForwardArgs& args, int64_t elem_bytes) {
    StagedJob& added = job[jobs++];
    added.shape = shape;
    added.args = args;
    added.units = StagedUnits(shape, shape.head_dim * elem_bytes);
    added.first = count;
    count += added.units.count;
    head_dim = shape.head_dim;
  }
  // Once the jobs are added, before the launch: the walk's steps for a launch of `blocks` blocks
  // (a launch without them would step by 0 and never end).
  __host__ void set_blocks(int64_t blocks) {
    stride = blocks * kWarps;
    for (int j = 0; j < jobs; ++j) {
      job[j].step_tokens = stride / job[j].units.per_token;
      job[j].step_parts = stride % job[j].units.per_token;
    }
  }
};

// A warp's place in its walk: the launch's unit `unit`, in job `job` the heads from part * rows of
// token `token`. Stepping adds the job's steps (a carry from parts into tokens) instead of dividing
// the unit index, a 64-bit division (a call of about 70 instructions) that took as many
// instructions as the unit's rows; the division runs when a walk enters a job, at most kMaxJobs
// times.
struct UnitWalk {
  int64_t unit, local, token;  // local: unit - job.first = token * per_token + part
  int job, part;

  __device__ UnitWalk(const StagedLaunch& launch, int64_t start) { enter(launch, start); }
  __device__ bool done(const StagedLaunch& launch) const { return unit >= launch.count; }
  __device__ void enter(const StagedLaunch& launch, int64_t at) {
    unit = at;
    if (done(launch)) return;
    job = launch.job_of(unit);
    local = unit - launch.job[job].first;
    token = local / launch.job[job].units.per_token;
    part = static_cast<int>(local - token * launch.job[job].units.per_token);
  }
  __device__ void step(const StagedLaunch& launch) {
    const StagedJob& in = launch.job[job];
    const StagedUnits& u = in.units;
    local += launch.stride;
    if (local >= u.count) return enter(launch, unit + launch.stride);
    unit += launch.stride;
    token += in.step_tokens;
    part += static_cast<int>(in.step_parts);
    if (part >= u.per_token) {
      part -= static_cast<int>(u.per_token);
      ++token;
    }
  }
  __device__ int64_t h0(const StagedLaunch& launch) const { return part * launch.job[job].units.rows; }
  __device__ int rows(const StagedLaunch& launch) const {  // heads h0 .. h0 + rows - 1
    const StagedUnits& u = launch.job[job].units;
    return static_cast<int>(u.heads - h0(launch) < u.rows ? u.heads - h0(launch) : u.rows);
  }
};

template <typename T, typename W, int V>
__global__ void __launch_bounds__(kWarps * 32) norm_rope_forward_staged_kernel(const __grid_constant__ StagedLaunch launch) {
  static_assert(sizeof(T) == 2 && V * sizeof(T) == 16, "whole 16-byte vectors of a 2-byte type");
  extern __shared__ __align__(128) unsigned char staged[];
  const int warp = threadIdx.x / 32;
  const bool leader = threadIdx.x % 32 == 0;
  const int64_t D = launch.head_dim, half = D / 2, row_bytes = D * int64_t(sizeof(T));
  const int chunks = static_cast<int>(half / V);
  const LanePlace lane(half);
  unsigned char* stage0 = staged + warp * kStages * kStageStride;
  uint64_t* full = reinterpret_cast<uint64_t*>(staged + kWarps * kStages * kStageStride) + warp * kStages;
  // The consumer's walk (every lane) and lane 0's, kStages units ahead of it, issuing.
  UnitWalk here(launch, int64_t{blockIdx.x} * kWarps + warp), ahead = here;

  if (leader) {
    for (int s = 0; s < kStages; ++s) cutlass::arch::ClusterBarrier::init(&full[s], 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncwarp();
  auto issue = [&](int s) {  // lane 0: ahead's rows, cos and sin into stage s, then the next unit
    const StagedJob& job = launch.job[ahead.job];
    const NormRopeForwardArgs& a = job.args;
    const int n = ahead.rows(launch);
    unsigned char* dst = stage0 + s * kStageStride;
    const int rope_bytes = a.cos ? int(row_bytes) : 0;
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full[s], uint32_t(n * row_bytes + 2 * rope_bytes));
    const T* x = static_cast<const T*>(a.x) + (ahead.token * job.shape.heads + ahead.h0(launch)) * D;
    cute::SM90_BULK_COPY_G2S::copy(x, &full[s], dst, int32_t(n * row_bytes));
    if (a.cos) {
      const int64_t r = rope_offset(ahead.token, job.shape, a.per_token_rope);
      cute::SM90_BULK_COPY_G2S::copy(static_cast<const T*>(a.cos) + r, &full[s], dst + kStageBytes, rope_bytes);
      cute::SM90_BULK_COPY_G2S::copy(static_cast<const T*>(a.sin) + r, &full[s], dst + kStageBytes + rope_bytes,
                                     rope_bytes);
    }
    ahead.step(launch);
  };
  if (leader) {
    for (int s = 0; s < kStages && !ahead.done(launch); ++s) issue(s);
  }
  // The norm weight of the lane's chunks, loaded again only when the walk enters another job.
  int weight_job = -1;
  HeldWeight<V> weight;
  for (int k = 0; !here.done(launch); here.step(launch), ++k) {
    const int s = k % kStages;
    cutlass::arch::ClusterBarrier::wait(&full[s], (k / kStages) & 1);
    const StagedJob& job = launch.job[here.job];
    const NormRopeForwardArgs& a = job.args;
    if (here.job != weight_job) {
      weight = HeldWeight<V>(WeightRead<W, V>{static_cast<const W*>(a.weight), half}, lane, chunks);
      weight_job = here.job;
    }
    const int n = here.rows(launch);
    const int64_t h0 = here.h0(launch);
    const T* xs = reinterpret_cast<const T*>(stage0 + s * kStageStride);
    const T* cs = reinterpret_cast<const T*>(stage0 + s * kStageStride + kStageBytes);
    const RopeRow<T, V> rope(a.cos ? cs : nullptr, cs + D, 0, half, lane, chunks);
    for (int head0 = 0; head0 < n; head0 += lane.rows_per_warp) {
      const int head = head0 + lane.slot;
      RowOffsets at = row_offsets(here.token, h0 + head, job.shape, a.transposed);
      at.in = head * D;  // in the stage
      forward_row<T, V>(a, D, chunks, lane, xs, weight, rope, at, head < n);
    }
    __syncwarp();  // every lane is done with stage s before it is refilled
    if (leader && !ahead.done(launch)) issue(s);
  }
}

}  // namespace gemma4::impl::cuda::norm_rope
