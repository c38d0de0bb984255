#pragma once
// What the three backward kernels (dK/dV at D <= 256, dK/dV at D = 512, dQ) share on the host
// side: their parameters (the arguments and the TMA descriptors of Q, dO, K and V) and the launch
// (launch_with_shared_storage, hopper_tiles.cuh, as the forward's).
#include "impl/cuda/hopper_forward_tiles.cuh"  // query_tensor, key_tensor

namespace gemma4::impl::cuda::hopper {

template <typename TmaQ, typename TmaKV>
struct BackwardParams {
  AttentionBackwardArgs args;
  TmaQ tma_q, tma_dout;  // by the tiles' SmemLayoutQ
  TmaKV tma_k, tma_v;    // by the key layout the kernel names (one layout for K and V)
};

// Q and dO as query tiles, K and V as tiles of `KeyLayout` (the first two modes: keys x D/halves).
template <typename Tiles, typename KeyLayout>
auto make_backward_params(const AttentionBackwardArgs& a) {
  const AttentionShape& s = a.shape;
  auto q_tile = take<0, 2>(typename Tiles::SmemLayoutQ{});
  auto kv_tile = take<0, 2>(KeyLayout{});
  auto tma_q = make_tma_copy(SM90_TMA_LOAD{}, query_tensor<Tiles>(a.q, s), q_tile);
  auto tma_dout = make_tma_copy(SM90_TMA_LOAD{}, query_tensor<Tiles>(a.dout, s), q_tile);
  auto tma_k = make_tma_copy(SM90_TMA_LOAD{}, key_tensor<Tiles>(a.k, s), kv_tile);
  auto tma_v = make_tma_copy(SM90_TMA_LOAD{}, key_tensor<Tiles>(a.v, s), kv_tile);
  return BackwardParams<decltype(tma_q), decltype(tma_k)>{a, tma_q, tma_dout, tma_k, tma_v};
}

}  // namespace gemma4::impl::cuda::hopper
