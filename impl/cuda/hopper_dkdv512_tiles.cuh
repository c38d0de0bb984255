#pragma once
// Tile shapes and shared-memory layout of the Hopper dK/dV kernel for head dim 512
// (hopper_attention_dkdv512.cu). dQ is another kernel's; this one only writes dK and dV.
#include "impl/cuda/hopper_backward_tiles.cuh"  // Steps, steps_of
#include "impl/cuda/hopper_forward_tiles.cuh"   // query_shape/key_shape, query_tensor/key_tensor

namespace gemma4::impl::cuda::hopper {

// Why 32 keys a CTA, not the 64 of hopper_backward_tiles.cuh: dK and dV stay in fp32 registers for
// the whole CTA. For 32 keys x 512 columns that is 2 x 16384 floats = 128 registers a thread over
// the two consumer warpgroups (256 threads), which fits kConsumerRegisters (232) beside the 16 + 16
// of S and dP; 64 keys would need 256 and spill.
//
// wgmma's M is at least 64, so 32 keys cannot be M: the gradients are computed transposed,
//   dV^T (512 x 32) += dO^T (512 x 64 queries) P (64 x 32),   dK^T (512 x 32) += Q^T dS,
// and consumer warpgroup w owns rows [256 w, 256 w + 256) of both (one half of D): an M = 256 tile
// of a 64 x 32 x 16 atom (4 atoms along M, 64 + 64 accumulator registers a thread). A is Q or dO
// read transposed (D contiguous: MN-major), B is P or dS read transposed (keys contiguous:
// MN-major); both operands come from shared memory.
//
// S = Q K^T and dP = dO V^T (64 queries x 32 keys, over all 512 columns) are not split by D: one
// warpgroup computes S and P, the other dP and dS, so that each does 64 x 32 x 512 there and
// 2 x 256 x 32 x 64 in the gradients (even work). P crosses to the dS side as fp32 through an
// exchange buffer (element for element: both accumulators have the same layout).
//
// Shared memory (bf16/fp16), 209 KiB (214016 bytes with the barriers) of kMaxSharedBytes' 227:
//  - K and V of the CTA's 32 keys, resident: 2 x 32 x 512 = 2 x 32 KiB;
//  - Q and dO of one 64-query tile, one stage each (2 x 64 KiB), each with its own pipeline, so
//    that the next dO loads as soon as this step's dV^T products are done and the next Q after
//    the dK^T products (two stages of each would need another 128 KiB);
//  - P and dS, 16-bit (2 x 64 x 32 = 2 x 4 KiB), and the fp32 exchange of P (8 KiB).
// Q, dO, K and V are stored as (rows, 256, 2 halves) in 128-byte-swizzled K-major atoms that TMA
// writes; a half is whole atoms (256 = 4 x 64 columns), so the transposed (MN-major) views of Q
// and dO that the gradients read are canonical wgmma layouts, as in hopper_backward_tiles.cuh.
template <typename T>
struct Dkdv512Tiles {
  using Element = typename CuteElement<T>::type;
  static constexpr int D = 512;
  static constexpr int kHalves = 2;  // consumer w owns D rows [w * kDh, (w + 1) * kDh) of dK^T, dV^T
  static constexpr int kDh = D / kHalves;
  static constexpr int kBlockN = 32;  // keys per CTA
  static constexpr int kBlockM = 64;  // queries per streamed tile
  static constexpr int kThreads = 3 * kWarpgroupThreads;

  using Atom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutKV = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<kDh>, Int<kHalves>>{}));
  using SmemLayoutQ = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockM>, Int<kDh>, Int<kHalves>>{}));
  // Q and dO as the A operand of dK^T and dV^T: (D/2, queries, halves), D the contiguous mode.
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_ordered_layout(Shape<Int<kDh>, Int<kBlockM>, Int<kHalves>>{}, Step<_2, _1, _3>{})));
  // P and dS as written: (queries, keys), keys contiguous, so that a thread's two adjacent keys of
  // the accumulator are one 32-bit store. A row is 32 keys = 64 bytes: the 64-byte swizzle atom
  // (8 rows x 32), whose transpose (keys contiguous, 8 queries) is exactly the MN-major 64-byte
  // atom, so the B view below is canonical.
  using SmemLayoutP = decltype(tile_to_shape(GMMA::Layout_K_SW64_Atom<Element>{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
  // P and dS as the B operand of dV^T and dK^T: (keys = N, queries = K), keys contiguous (MN-major).
  using SmemLayoutPt = decltype(composition(
      SmemLayoutP{}, make_ordered_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, Step<_2, _1>{})));

  // S or dP: 64 queries x 32 keys, over one half of D a call (two calls cover D). K-major both.
  using MmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBlockM>, Int<kBlockN>, Int<kDh>>>()));
  // dV^T or dK^T of one warpgroup: 256 D rows x 32 keys over the 64 queries, both operands MN-major.
  using MmaDkv =
      decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<Int<kDh>, Int<kBlockN>, Int<kBlockM>>,
                                                   GMMA::Major::MN, GMMA::Major::MN>()));
  using Pipeline = cutlass::PipelineTmaAsync<1>;

  // The epilogue's staging of one warpgroup's dV (then dK) as (keys, its 256 columns), rows padded
  // by 8 elements (16 bytes) so that the accumulator's scattered 16-bit writes (8 columns x 4 key
  // pairs a warp) fall in different banks. It reuses the K tile (consumer 0) or the V tile
  // (consumer 1), each read only by that warpgroup's own S or dP, and done with by then.
  static constexpr int kStageRow = kDh + 8;
  static_assert(kBlockN * kStageRow * int(sizeof(Element)) <= kBlockN * D * int(sizeof(Element)),
                "the epilogue's staging must fit a K (V) tile");

  struct SharedStorage {
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> k;
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> v;
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> dout;
    array_aligned<Element, cosize_v<SmemLayoutP>, 1024> p;
    array_aligned<Element, cosize_v<SmemLayoutP>, 1024> ds;
    array_aligned<float, kBlockM * kBlockN, 16> exchange;  // P in fp32, the S side to the dS side
    typename Pipeline::SharedStorage q_pipeline, dout_pipeline;
    uint64_t kv_loaded;  // an mbarrier: K and V have landed
  };
  static constexpr int kTileBytes = kBlockM * D * int(sizeof(Element));  // one Q (dO) tile
  static constexpr int kKVBytes = 2 * kBlockN * D * int(sizeof(Element));
};

}  // namespace gemma4::impl::cuda::hopper
