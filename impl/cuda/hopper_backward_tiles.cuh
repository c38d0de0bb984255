#pragma once
// The Hopper attention backward's tile shapes and shared-memory layout (head dims 64 and 256).
#include "impl/cuda/hopper_tiles.cuh"

namespace gemma4::impl::cuda::hopper {

// The key-major pass of the backward (dK and dV; dQ has a pass of its own: hopper_dq_tiles.cuh).
// One CTA owns 64 keys of one kv head (K and V resident) and streams 64-query tiles of Q and dO
// through a 2-stage TMA pipeline. Per query tile, two consumer warpgroups:
//  - S^T = K Q^T and dP^T = V dO^T: each warpgroup takes 32 of the 64 queries (64 x 32 blocks
//    over all of D), so P^T = exp(S^T - lse) and dS^T = P^T (dP^T - delta) need no exchange;
//  - P^T and dS^T go to shared memory (bf16/fp16), because dV += P^T dO and dK += dS^T Q contract
//    all 64 queries, half of which the other warpgroup computed;
//  - dV and dK: each warpgroup owns half of D's columns, in registers for the whole CTA
//    (64 x D/2 fp32 each: 2 x 64 registers a thread at D = 256), written once at the end.
// Why not 128 keys a CTA (FlashAttention-3's choice at D = 128): dK and dV of 128 keys x 256
// columns would need 256 fp32 registers a thread across two warpgroups. Head dim 512 has its own
// plan (32 keys, transposed products): hopper_dkdv512_tiles.cuh.
// Shared memory at D = 256: K and V 64 x 256 (2 x 32 KiB) + 2 stages of Q and dO (4 x 32 KiB)
// + P^T and dS^T, double-buffered so that one barrier per tile suffices (4 x 8 KiB) = 224 KiB.
// Every tile is stored as (rows, D/2, halves [x stages]) in K-major swizzled atoms as wide as one
// half (128 bytes at D = 256, 64 bytes at D = 64), so a half is whole atoms and the transposed
// views that wgmma reads (MN-major, for 16-bit types) stay canonical.
template <typename T, int kD>
struct BackwardTiles {
  using Element = typename CuteElement<T>::type;
  static constexpr int D = kD;
  static constexpr int kHalves = 2;  // each consumer owns one half of D in dK and dV
  static constexpr int kDh = D / 2;
  static constexpr int kBlockN = 64;  // keys per CTA
  static constexpr int kBlockM = 64;  // queries per streamed tile
  static constexpr int kStages = 2;
  static constexpr int kSlots = kStages * kHalves;  // Q (dO) tiles: slot = stage * kHalves + half
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  static_assert(D == 64 || D == 256, "the backward's layouts are worked out for head dims 64 and 256");

  using Atom = std::conditional_t<kDh % 64 == 0, GMMA::Layout_K_SW128_Atom<Element>, GMMA::Layout_K_SW64_Atom<Element>>;
  using SmemLayoutKV = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<kDh>, Int<kHalves>>{}));
  using SmemLayoutQ = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockM>, Int<kDh>, Int<kSlots>>{}));
  // Q and dO as the B operand of dK and dV: (D/2, queries, slots), D the contiguous (MN-major) mode.
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_ordered_layout(Shape<Int<kDh>, Int<kBlockM>, Int<kSlots>>{}, Step<_2, _1, _3>{})));
  // P^T and dS^T: (keys, queries, buffers), queries contiguous.
  using SmemLayoutPt =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockN>, Int<kBlockM>, _2>{}));

  // S^T or dP^T of one warpgroup: 64 keys x 32 queries, over one half of D (two calls cover D).
  using MmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBlockN>, Int<kBlockM / 2>, Int<kDh>>>()));
  // dV or dK of one warpgroup: 64 keys x D/2, over the 64 queries.
  using MmaDkv =
      decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBlockN>, Int<kDh>, Int<kBlockM>>,
                                                   GMMA::Major::K, GMMA::Major::MN>()));
  using Pipeline = cutlass::PipelineTmaAsync<kStages>;

  struct SharedStorage {
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> k;
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> v;
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> dout;
    array_aligned<Element, cosize_v<SmemLayoutPt>, 1024> pt;
    array_aligned<Element, cosize_v<SmemLayoutPt>, 1024> dst;
    typename Pipeline::SharedStorage pipeline;
    uint64_t kv_loaded;  // an mbarrier: K and V have landed
  };
  static constexpr int kStageBytes = 2 * kBlockM * D * int(sizeof(Element));  // Q and dO of one tile
  static constexpr int kKVBytes = 2 * kBlockN * D * int(sizeof(Element));
};

// The key-major passes' work (this one's and hopper_dkdv512_tiles.cuh's): the grid is (kv heads,
// key blocks, batch), heads fastest, and a CTA steps through the query heads of its kv head's
// group and, for each, the query tiles of kBlockM rows that intersect the band of its kBlockN keys.
__device__ inline int kv_head() { return blockIdx.x; }
__device__ inline int key_block() { return blockIdx.y; }

// Step i of a CTA: query head kv_head * group + i / per_head, query tile first + i % per_head.
struct Steps {
  int first, per_head, count, head0;
  __device__ int head(int i) const { return head0 + i / per_head; }
  __device__ int tile(int i) const { return first + i % per_head; }
};

template <typename Tiles>
__device__ Steps steps_of(const AttentionShape& s) {
  const TileRange tiles = band_tiles(s, key_block() * Tiles::kBlockN, Tiles::kBlockN, Tiles::kBlockM,
                                     /*rows_are_queries=*/false);
  const int group = s.q_heads / s.kv_heads, per_head = tiles.last - tiles.first + 1;
  return {tiles.first, per_head, group * per_head, kv_head() * group};
}

}  // namespace gemma4::impl::cuda::hopper
