#pragma once
// The Hopper attention forward's tile shapes, shared-memory layout and global-memory views.
#include "impl/cuda/hopper_tiles.cuh"

namespace gemma4::impl::cuda::hopper {

// Two consumer warpgroups of 64 query rows' worth of wgmma each. How they share a CTA's work
// depends on the head dim, because a consumer thread's fp32 output block must fit in its 232
// registers (kConsumerRegisters, hopper_tiles.cuh) beside the scores:
//  - D <= 256 ("row split"): they split 128 query rows; each holds O 64 x D (D = 256: 128
//    registers) and contracts all of D in S = Q K^T.
//  - D = 512 ("D split"): O 64 x 512 would be 256 registers a thread, so they take the same 64
//    rows and split D: each contracts its half of D in S (a partial score block, exchanged through
//    shared memory and summed, in the same order on both sides, so both hold bitwise the same S and
//    the same softmax) and owns its half of O's columns (128 registers). Both products are split
//    evenly, nothing is computed twice, and the exchange (64 x 64 fp32 a side) costs shared-memory
//    traffic of a quarter of one K tile per key tile. The alternative, a CTA pair splitting D over
//    a cluster, would exchange the same block through distributed shared memory at higher latency.
// Shared memory (227 KiB a CTA), bf16/fp16:
//  - D = 256: Q 128 x 256 (64 KiB) + 2 stages of K and of V, 64 keys each (4 x 32 KiB) = 192 KiB.
//    64 keys measured faster than 80 (2 stages, 224 KiB) and 96 (1 stage): on an H200 at S = 8192,
//    sliding forward 424 / 329 / 387 TFLOP/s and dense causal 559 / 443 / 536.
//  - D = 512: Q 64 x 512 (64 KiB) + 1 stage of K and of V, 64 keys (2 x 64 KiB) + the exchange
//    (2 x 64 x 64 fp32 = 32 KiB) = 224 KiB. One stage each still overlaps: K of the next tile
//    loads during this tile's P V, V during the next tile's Q K^T (K and V have their own
//    producer warps and barriers).
//  - D = 64 (the suite's small models): the D = 256 shapes, 48 KiB.
// Every tile is stored as (rows, D/halves, halves [x stages]) in 128-byte-swizzled K-major atoms,
// which TMA writes and wgmma reads without bank conflicts.
template <typename T, int kD>
struct ForwardTiles {
  using Element = typename CuteElement<T>::type;
  static constexpr int D = kD;
  static constexpr int kHalves = D == 512 ? 2 : 1;  // how many ways D is split across consumers
  static constexpr int kDh = D / kHalves;           // one consumer's share of D
  static constexpr int kBlockM = 128 / kHalves;     // query rows per CTA
  static constexpr int kBlockN = 64;
  static constexpr int kStages = D == 512 ? 1 : 2;
  static constexpr int kSlots = kStages * kHalves;  // K (V) tiles in shared memory: slot = stage * kHalves + half
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  using Atom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockM>, Int<kDh>, Int<kHalves>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<kDh>, Int<kSlots>>{}));
  // V read as the B operand of P V: (D, keys), the same bytes with D as the contiguous (MN-major)
  // mode, which wgmma accepts for 16-bit types.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_ordered_layout(Shape<Int<kDh>, Int<kBlockN>, Int<kSlots>>{}, Step<_2, _1, _3>{})));
  using MmaS =
      decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kDh>>>()));
  using MmaO = decltype(make_tiled_mma(GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kDh>, Int<kBlockN>>,
                                                            GMMA::Major::K, GMMA::Major::MN>()));
  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  static constexpr int kExchangeFloats = kHalves == 2 ? 2 * 64 * kBlockN : 1;

  struct SharedStorage {
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> k;
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> v;
    array_aligned<float, kExchangeFloats, 16> partial_scores;  // the D split's exchange, one block a side
    typename Pipeline::SharedStorage k_pipeline, v_pipeline;
    uint64_t q_loaded;  // an mbarrier: the Q tile has landed (and tile_index is written)
    uint64_t q_free;    // an mbarrier: the consumers are done with the Q tile
    int tile_index[2];  // the work tile whose Q is loading, by q_loaded's phase parity
  };
  static constexpr int kStageBytes = kBlockN * D * int(sizeof(Element));  // one K (V) stage, every half
  static constexpr int kQBytes = kBlockM * D * int(sizeof(Element));
};

// Global tensors as TMA sees them: (S, D/halves, halves, heads, B), D contiguous. Q is
// [B, S, Hq, D], K and V [B, Hkv, S, D] (attention_kernels.h).
template <typename Tiles>
CUTE_HOST_DEVICE auto query_shape(const AttentionShape& s) {
  return make_shape(s.seq, Int<Tiles::kDh>{}, Int<Tiles::kHalves>{}, s.q_heads, s.batch);
}
template <typename Tiles>
CUTE_HOST_DEVICE auto key_shape(const AttentionShape& s) {
  return make_shape(s.seq, Int<Tiles::kDh>{}, Int<Tiles::kHalves>{}, s.kv_heads, s.batch);
}

template <typename Tiles>
auto query_tensor(const void* p, const AttentionShape& s) {
  constexpr int D = Tiles::D, Dh = Tiles::kDh;
  using Element = typename Tiles::Element;
  return make_tensor(make_gmem_ptr(static_cast<const Element*>(p)),
                     make_layout(query_shape<Tiles>(s), make_stride(int64_t(s.q_heads) * D, _1{}, Int<Dh>{}, int64_t(D),
                                                                    int64_t(s.seq) * s.q_heads * D)));
}
template <typename Tiles>
auto key_tensor(const void* p, const AttentionShape& s) {
  constexpr int D = Tiles::D, Dh = Tiles::kDh;
  using Element = typename Tiles::Element;
  return make_tensor(make_gmem_ptr(static_cast<const Element*>(p)),
                     make_layout(key_shape<Tiles>(s), make_stride(int64_t(D), _1{}, Int<Dh>{}, int64_t(s.seq) * D,
                                                                  int64_t(s.kv_heads) * s.seq * D)));
}

// One producer thread's loop over the key tiles [tiles.first, tiles.last] of one kv head: K (or V)
// tile n into the stage's slots (slot = stage * halves + half), every half of D on the stage's
// barrier. `stage` carries on from one call to the next. Used by the forward and the dQ pass;
// `SmemLayout` is (keys, D/halves, slots).
template <typename Tiles, typename SmemLayout, typename Tma, typename Pipeline>
__device__ void load_key_tiles(const Tma& tma, typename Tiles::Element* smem, Pipeline& pipeline,
                               typename Pipeline::PipelineState& stage, const AttentionShape& s, int kv_head,
                               int batch, TileRange tiles) {
  constexpr int N = size<0>(SmemLayout{}), Dh = Tiles::kDh, kHalves = Tiles::kHalves;
  Tensor sT = make_tensor(make_smem_ptr(smem), SmemLayout{});
  Tensor mT = tma.get_tma_tensor(key_shape<Tiles>(s));
  for (int n = tiles.first; n <= tiles.last; ++n, ++stage) {
    pipeline.producer_acquire(stage);
    CUTE_UNROLL
    for (int half = 0; half < kHalves; ++half) {
      Tensor gT = local_tile(mT(_, _, half, kv_head, batch), Shape<Int<N>, Int<Dh>>{}, make_coord(_, _0{}));
      auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sT), group_modes<0, 2>(gT));
      copy(tma.with(*pipeline.producer_get_barrier(stage)), tg(_, n), ts(_, stage.index() * kHalves + half));
    }
  }
}

// Rows [block * rows, +rows) of one head of a query-side tensor (Q, dO), every half of D, into
// the (rows, D/halves, halves) tile `smem`, on the transaction barrier `loaded` (whose expected
// bytes the caller set).
template <typename Tiles, typename SmemLayout, typename Tma>
__device__ void load_query_rows(const Tma& tma, typename Tiles::Element* smem, uint64_t& loaded,
                                const AttentionShape& s, int block, int head, int batch) {
  constexpr int M = size<0>(SmemLayout{}), Dh = Tiles::kDh;
  Tensor sQ = make_tensor(make_smem_ptr(smem), SmemLayout{});
  Tensor mQ = tma.get_tma_tensor(query_shape<Tiles>(s));
  CUTE_UNROLL
  for (int half = 0; half < Tiles::kHalves; ++half) {
    Tensor gQ = local_tile(mQ(_, _, half, head, batch), Shape<Int<M>, Int<Dh>>{}, make_coord(block, _0{}));
    auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    copy(tma.with(loaded), tg, ts(_, half));
  }
}

}  // namespace gemma4::impl::cuda::hopper
