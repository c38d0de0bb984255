#pragma once
// What the Hopper (sm_90a) attention kernels share: CuTe's element types, the warpgroup roles, one
// wgmma call, and the two register re-layouts of a wgmma accumulator that the softmax needs.
//
// Terms. A warpgroup is 4 warps (128 threads) that issue one wgmma together. The accumulator of a
// 64 x N wgmma gives each thread 2 rows (lane/4 and lane/4 + 8 of its warp's 16) and N/4 columns,
// in pairs of adjacent columns every 8: CuTe's layout ((2 cols, 2 rows, N/8), MMA_M, MMA_N).
#include <cute/tensor.hpp>
// after cute/tensor.hpp, which they need
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>

#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include "impl/cuda/attention_common.cuh"

namespace gemma4::impl::cuda::hopper {

using namespace cute;

template <typename T>
struct CuteElement;
template <>
struct CuteElement<__nv_bfloat16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct CuteElement<__half> {
  using type = cutlass::half_t;
};
// And back: the CUDA type of a CuTe element, which the output stores write.
template <typename Element>
using CudaElement = std::conditional_t<std::is_same_v<Element, cutlass::bfloat16_t>, __nv_bfloat16, __half>;

// Warpgroup 0 produces (one thread issues every TMA load), the others consume (wgmma + softmax).
// The producer gives its registers back (setmaxnreg) so that each consumer thread can hold a
// 64 x 256 fp32 output block (128 registers) beside its scores: 40 * 128 + 232 * 256 = 64512 of
// the SM's 65536 registers.
constexpr int kWarpgroupThreads = 128;
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;

// The parameters of a TMA pipeline (full/empty mbarriers per stage) whose producer is warpgroup 0
// and whose consumers are every other thread; `leader` is the producer thread that issues the loads.
template <typename Pipeline>
__device__ inline typename Pipeline::Params pipeline_params(uint32_t transaction_bytes, int num_consumers, int leader) {
  typename Pipeline::Params params;
  params.transaction_bytes = transaction_bytes;
  params.role =
      threadIdx.x < kWarpgroupThreads ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  params.num_consumers = num_consumers;
  params.is_leader = threadIdx.x == leader;
  return params;
}

// Fences a wgmma's operands: its accumulator c, and a when a is registers (not descriptors).
template <typename A, typename C>
__device__ inline void fence_operands(const A& a, C& c) {
  if constexpr (!std::is_same_v<typename A::iterator, GMMA::DescriptorIterator>) {
    warpgroup_fence_operand(const_cast<A&>(a));
  }
  warpgroup_fence_operand(c);
}

// Issues c (+)= a * b on one warpgroup without waiting: the caller waits with warpgroup_wait<N>()
// (N: how many issued products may still run) and then fences c (and a, when a is registers)
// with fence_operands, so that the compiler neither reads c early nor reuses a's registers while
// the product still reads them.
template <bool kZeroInit, typename Mma, typename A, typename B, typename C>
__device__ inline void wgmma_issue(Mma& mma, const A& a, const B& b, C& c) {
  fence_operands(a, c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  fence_operands(a, c);
}

// The accumulator as (rows, columns): ((2 rows, MMA_M), (2 cols, N/8, MMA_N)).
template <typename Layout>
__device__ inline auto rows_by_columns(Layout l) {
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

// The accumulator of S = Q K^T re-read as the register A operand of O += P V: a 64 x 16 slice of A
// holds exactly the values a 64 x 16 slice of the accumulator holds, so no data moves, only the
// layout: ((2, 2, N/8), MMA_M, MMA_N) -> ((2, 2, 2), MMA_M, (N/16, MMA_N)).
template <typename Layout>
__device__ inline auto as_a_operand(Layout l) {
  auto v = logical_divide(get<0>(l), Shape<Underscore, Underscore, _2>{});
  return make_layout(make_layout(get<0>(v), get<1>(v), get<2, 0>(v)), get<1>(l), make_layout(get<2, 1>(v), get<2>(l)));
}

// Max and sum over the 4 threads (a quad) that share an accumulator row.
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// Two adjacent output values, rounded to the storage type.
__device__ inline void store_pair(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ inline void store_pair(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}

// `kernel` on `grid` with Tiles::kThreads threads and Tiles::SharedStorage as its dynamic shared
// memory (opted in on every launch: the attribute is per kernel and cheap to set).
template <typename Tiles, typename Params>
void launch_with_shared_storage(void (*kernel)(Params), dim3 grid, const Params& params, cudaStream_t stream) {
  constexpr int bytes = int(sizeof(typename Tiles::SharedStorage));
  static_assert(bytes <= kMaxSharedBytes, "the kernel's tiles exceed shared memory");
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  kernel<<<grid, Tiles::kThreads, bytes, stream>>>(params);
}

}  // namespace gemma4::impl::cuda::hopper
