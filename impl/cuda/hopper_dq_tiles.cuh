#pragma once
// The dQ pass of the Hopper backward: tile shapes and shared-memory layout (head dims 64, 256, 512).
#include "impl/cuda/hopper_forward_tiles.cuh"

namespace gemma4::impl::cuda::hopper {

//
// Why a pass of its own: dQ = dS K sums over every key block of the band. Computed inside the
// key-major backward (one CTA per key block), each CTA adds its 64 x D fp32 share to global memory,
// and at head dim 256 those reductions in L2, not the tensor cores, bound the kernel (issue 15's
// Nsight: L2 at 60%, tensor pipe under 27%). Here one CTA owns a block of query rows, walks the
// key tiles of its band (as the forward does) and keeps dQ in registers: no reduction in memory,
// deterministic by construction. The price is S and dP computed a second time (the key-major pass
// computes them for dK and dV): 7 products where the fused backward has 5.
//
// The warpgroups split the work as in the forward (hopper_forward_tiles.cuh), because dQ 64 x D
// fp32 must fit a consumer thread's 232 registers beside S and dP:
//  - D <= 256 ("row split"): each consumer takes 64 of the CTA's 128 query rows over all of D:
//    dQ 64 x 256 is 128 registers, S and dP 64 x 64 are 32 each, dS as the A operand 16.
//  - D = 512 ("D split"): both take the same 64 rows; each owns half of dQ's columns (128
//    registers). Consumer 1 computes S = Q K^T and P, consumer 2 dP = dO V^T, each over all of
//    D; they swap P and dP through shared memory (64 x 32 fp32 a side) so that both form the same
//    dS = P (dP - delta) and multiply it by their half of K.
// Shared memory (227 KiB a CTA), bf16/f16:
//  - D = 256: Q and dO 128 x 256 (2 x 64 KiB) + K 2 stages x 64 keys (64 KiB) + V 1 stage (32 KiB)
//    = 224 KiB. K is read twice per tile (S at the start, dQ += dS K at the end), so its next tile
//    needs a slot of its own to load early; V only once (dP), so one stage loads the next V while
//    this tile's softmax and dQ run.
//  - D = 512: Q and dO 64 x 512 (2 x 64 KiB) + K and V 32 keys, one stage each (2 x 32 KiB) + the
//    swap (2 x 8 KiB) = 208 KiB; a second K stage (32 KiB) does not fit. 32 keys, not 64: Q, dO, K
//    and V of 64 keys alone would be 256 KiB.
//  - D = 64 (the suite's small models): the D = 256 shapes, 56 KiB.
template <typename T, int kD>
struct DqTiles {
  using Element = typename CuteElement<T>::type;
  static constexpr int D = kD;
  static constexpr int kHalves = D == 512 ? 2 : 1;  // 2: the D split
  static constexpr int kDh = D / kHalves;
  static constexpr int kBlockM = 128 / kHalves;  // query rows per CTA
  static constexpr int kBlockN = D == 512 ? 32 : 64;
  static constexpr int kKStages = D == 512 ? 1 : 2;
  static constexpr int kKSlots = kKStages * kHalves;  // slot = stage * kHalves + half
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  using Atom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockM>, Int<kDh>, Int<kHalves>>{}));  // Q, dO
  using SmemLayoutK = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<kDh>, Int<kKSlots>>{}));
  using SmemLayoutV = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<kDh>, Int<kHalves>>{}));
  // K as the B operand of dQ += dS K: (D/halves, keys, slots), D the contiguous (MN-major) mode.
  using SmemLayoutKt = decltype(composition(
      SmemLayoutK{}, make_ordered_layout(Shape<Int<kDh>, Int<kBlockN>, Int<kKSlots>>{}, Step<_2, _1, _3>{})));
  // S = Q K^T and dP = dO V^T: 64 rows x kBlockN keys over one half of D a call.
  using MmaS =
      decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kDh>>>()));
  // dQ (this consumer's columns) += dS K, dS from registers.
  using MmaDq = decltype(make_tiled_mma(GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kDh>, Int<kBlockN>>,
                                                             GMMA::Major::K, GMMA::Major::MN>()));
  using KPipeline = cutlass::PipelineTmaAsync<kKStages>;
  using VPipeline = cutlass::PipelineTmaAsync<1>;
  static constexpr int kSwapFloats = kHalves == 2 ? 2 * 64 * kBlockN : 1;  // P, then dP

  struct SharedStorage {
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> dout;
    array_aligned<Element, cosize_v<SmemLayoutK>, 1024> k;
    array_aligned<Element, cosize_v<SmemLayoutV>, 1024> v;
    array_aligned<float, kSwapFloats, 16> swap;
    typename KPipeline::SharedStorage k_pipeline;
    typename VPipeline::SharedStorage v_pipeline;
    uint64_t rows_loaded;  // an mbarrier: Q and dO have landed
  };
  static constexpr int kKeyTileBytes = kBlockN * D * int(sizeof(Element));  // one K (V) tile, every half
  static constexpr int kRowsBytes = 2 * kBlockM * D * int(sizeof(Element));  // Q and dO
};

}  // namespace gemma4::impl::cuda::hopper
