// The attention backward on Hopper's own instructions (sm_90a), in two passes with no sum in
// memory, so deterministic by construction:
//  - dK and dV, key-major: this file for head dims 64 and 256 (one CTA per 64 keys of one kv head,
//    looping over the query heads of its group and the query tiles inside the band;
//    hopper_backward_tiles.cuh has the shapes), hopper_attention_dkdv512.cu for head dim 512;
//  - dQ, query-major: hopper_attention_dq.cu (why a pass of its own: hopper_dq_tiles.cuh).
// The key-major kernel here:
//   producer  (warpgroup 0, one thread): K and V once, then Q and dO of every tile by TMA;
//   consumers (warpgroups 1 and 2): S^T = K Q^T, dP^T = V dO^T (wgmma), P^T = exp(S^T - lse) with
//             the mask on band-edge tiles only, dS^T = P^T (dP^T - delta); then dV += P^T dO and
//             dK += dS^T Q, kept in registers and written once.
// lse comes from the forward, delta = rowsum(dO * O) from launch_attention_delta (below).
#include "impl/cuda/hopper_backward_launch.cuh"
#include "impl/cuda/hopper_backward_tiles.cuh"

namespace gemma4::impl::cuda::hopper {
namespace {

// Named barriers (beyond CUTLASS's reserved ones) among the two consumer warpgroups.
constexpr uint32_t kPdsWrittenBarrier = 0;
constexpr int kConsumerThreads = 2 * kWarpgroupThreads;

template <typename Tiles, typename Params>
__device__ void produce(const Params& p, typename Tiles::SharedStorage& smem, typename Tiles::Pipeline& pipeline) {
  constexpr int M = Tiles::kBlockM, N = Tiles::kBlockN, Dh = Tiles::kDh;
  const AttentionShape& s = p.args.shape;
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Tiles::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Tiles::SmemLayoutKV{});
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Tiles::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename Tiles::SmemLayoutQ{});
  Tensor mK = p.tma_k.get_tma_tensor(key_shape<Tiles>(s));
  Tensor mV = p.tma_v.get_tma_tensor(key_shape<Tiles>(s));
  Tensor mQ = p.tma_q.get_tma_tensor(query_shape<Tiles>(s));
  Tensor mdO = p.tma_dout.get_tma_tensor(query_shape<Tiles>(s));
  const int b = blockIdx.z;

  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&smem.kv_loaded, Tiles::kKVBytes);
  CUTE_UNROLL
  for (int half = 0; half < Tiles::kHalves; ++half) {
    auto load_rows = [&](const auto& tma, const auto& m, auto& sm) {
      Tensor g = local_tile(m(_, _, half, kv_head(), b), Shape<Int<N>, Int<Dh>>{}, make_coord(key_block(), _0{}));
      auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sm), group_modes<0, 2>(g));
      copy(tma.with(smem.kv_loaded), tg, ts(_, half));
    };
    load_rows(p.tma_k, mK, sK);
    load_rows(p.tma_v, mV, sV);
  }

  const Steps steps = steps_of<Tiles>(s);
  auto stage = cutlass::make_producer_start_state<typename Tiles::Pipeline>();
  for (int i = 0; i < steps.count; ++i, ++stage) {
    pipeline.producer_acquire(stage);
    auto* full = pipeline.producer_get_barrier(stage);
    CUTE_UNROLL
    for (int half = 0; half < Tiles::kHalves; ++half) {
      auto load_tile = [&](const auto& tma, const auto& m, auto& sm) {
        Tensor g =
            local_tile(m(_, _, half, steps.head(i), b), Shape<Int<M>, Int<Dh>>{}, make_coord(steps.tile(i), _0{}));
        auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sm), group_modes<0, 2>(g));
        copy(tma.with(*full), tg, ts(_, stage.index() * Tiles::kHalves + half));
      };
      load_tile(p.tma_q, mQ, sQ);
      load_tile(p.tma_dout, mdO, sdO);
    }
  }
}

template <typename Tiles, typename Params>
__device__ void consume(const Params& p, typename Tiles::SharedStorage& smem, typename Tiles::Pipeline& pipeline) {
  constexpr int M = Tiles::kBlockM, N = Tiles::kBlockN, Dh = Tiles::kDh, D = Tiles::D;
  using Element = typename Tiles::Element;
  using T = CudaElement<Element>;
  const AttentionShape& s = p.args.shape;
  const int b = blockIdx.z, k0 = key_block() * N;
  const int consumer = threadIdx.x / kWarpgroupThreads - 1, thread = threadIdx.x % kWarpgroupThreads;
  const int32_t* valid = p.args.key_valid ? p.args.key_valid + int64_t(b) * s.seq : nullptr;
  const Steps steps = steps_of<Tiles>(s);

  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Tiles::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Tiles::SmemLayoutKV{});
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Tiles::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename Tiles::SmemLayoutQ{});
  Tensor sQt = make_tensor(make_smem_ptr(smem.q.data()), typename Tiles::SmemLayoutQt{});
  Tensor sdOt = make_tensor(make_smem_ptr(smem.dout.data()), typename Tiles::SmemLayoutQt{});
  Tensor sPt = make_tensor(make_smem_ptr(smem.pt.data()), typename Tiles::SmemLayoutPt{});
  Tensor sdSt = make_tensor(make_smem_ptr(smem.dst.data()), typename Tiles::SmemLayoutPt{});

  // S^T and dP^T: this warpgroup's 32 queries of the tile.
  typename Tiles::MmaSdP mma_sdp;
  auto thr_sdp = mma_sdp.get_thread_slice(thread);
  auto my_queries = Shape<Int<M / 2>, Int<Dh>, Int<Tiles::kSlots>>{};
  Tensor tSrK = thr_sdp.partition_fragment_A(sK);  // (.., .., k blocks, halves)
  Tensor tSrV = thr_sdp.partition_fragment_A(sV);
  Tensor tSrQ = thr_sdp.partition_fragment_B(local_tile(sQ, my_queries, make_coord(consumer, _0{}, _0{})));
  Tensor tSrdO = thr_sdp.partition_fragment_B(local_tile(sdO, my_queries, make_coord(consumer, _0{}, _0{})));
  Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<N>, Int<M / 2>>{});
  Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<Int<N>, Int<M / 2>>{});
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<Int<N>, Int<M / 2>>{}));
  Tensor St = make_tensor(tSrS.data(), rows_by_columns(tSrS.layout()));
  Tensor dPt = make_tensor(tSrdP.data(), rows_by_columns(tSrdP.layout()));
  Tensor cSt = make_tensor(tScS.data(), rows_by_columns(tScS.layout()));
  constexpr int R = size<0>(St), C = size<1>(St);  // keys, queries a thread holds

  // dV and dK: this warpgroup's half of D, for the CTA's 64 keys.
  typename Tiles::MmaDkv mma_dkv;
  auto thr_dkv = mma_dkv.get_thread_slice(thread);
  Tensor tKVrPt = thr_dkv.partition_fragment_A(sPt);  // (.., .., k blocks, buffers)
  Tensor tKVrdSt = thr_dkv.partition_fragment_A(sdSt);
  Tensor tKVrdOt = thr_dkv.partition_fragment_B(sdOt);  // (.., .., k blocks, slots)
  Tensor tKVrQt = thr_dkv.partition_fragment_B(sQt);
  Tensor tdVrdV = partition_fragment_C(mma_dkv, Shape<Int<N>, Int<Dh>>{});
  Tensor tdKrdK = partition_fragment_C(mma_dkv, Shape<Int<N>, Int<Dh>>{});
  clear(tdVrdV);
  clear(tdKrdK);

  cutlass::arch::ClusterBarrier::wait(&smem.kv_loaded, 0);
  typename Tiles::Pipeline::PipelineState stage;
  for (int i = 0; i < steps.count; ++i, ++stage) {
    const int head = steps.head(i), q0 = steps.tile(i) * M, buffer = i % 2;
    const int qslot = stage.index() * Tiles::kHalves;
    pipeline.consumer_wait(stage);
    wgmma_issue<true>(mma_sdp, tSrK(_, _, _, 0), tSrQ(_, _, _, qslot), tSrS);
    wgmma_issue<false>(mma_sdp, tSrK(_, _, _, 1), tSrQ(_, _, _, qslot + 1), tSrS);
    wgmma_issue<true>(mma_sdp, tSrV(_, _, _, 0), tSrdO(_, _, _, qslot), tSrdP);
    wgmma_issue<false>(mma_sdp, tSrV(_, _, _, 1), tSrdO(_, _, _, qslot + 1), tSrdP);

    // The statistics of this thread's queries, read while the products run. A query past the end
    // gets lse = +inf (P = 0); a row that saw no key in the forward has lse = +inf already.
    const int64_t stats = (int64_t(b) * s.q_heads + head) * s.seq;
    const int my_q0 = q0 + consumer * (M / 2);
    float lse[C], delta[C];
    CUTE_UNROLL
    for (int c = 0; c < C; ++c) {
      const int q = my_q0 + get<1>(cSt(0, c));
      lse[c] = q < s.seq ? p.args.lse[stats + q] * tile::kLog2e : INFINITY;
      delta[c] = q < s.seq ? p.args.delta[stats + q] : 0.f;
    }
    warpgroup_wait<0>();
    fence_operands(tSrK, tSrS);
    fence_operands(tSrV, tSrdP);

    // P^T and dS^T in fp32, then to shared memory two adjacent queries (one 32-bit store) at a time.
    const bool unmasked = tile_unmasked(s, valid, k0, N, q0, M, /*rows_are_queries=*/false);
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < C; ++c) {
        const bool in = unmasked || allowed(s, valid, my_q0 + get<1>(cSt(r, c)), k0 + get<0>(cSt(r, c)));
        St(r, c) = in ? exp2f(St(r, c) * tile::kLog2e - lse[c]) : 0.f;
        dPt(r, c) = St(r, c) * (dPt(r, c) - delta[c]);
      }
      CUTE_UNROLL
      for (int c = 0; c < C; c += 2) {
        const int key = get<0>(cSt(r, c)), q = consumer * (M / 2) + get<1>(cSt(r, c));
        store_pair(reinterpret_cast<T*>(raw_pointer_cast(&sPt(key, q, buffer))), St(r, c), St(r, c + 1));
        store_pair(reinterpret_cast<T*>(raw_pointer_cast(&sdSt(key, q, buffer))), dPt(r, c), dPt(r, c + 1));
      }
    }
    cutlass::arch::fence_view_async_shared();  // the stores above, before wgmma reads them
    cutlass::arch::NamedBarrier::sync(kConsumerThreads, kPdsWrittenBarrier);

    wgmma_issue<false>(mma_dkv, tKVrPt(_, _, _, buffer), tKVrdOt(_, _, _, qslot + consumer), tdVrdV);
    wgmma_issue<false>(mma_dkv, tKVrdSt(_, _, _, buffer), tKVrQt(_, _, _, qslot + consumer), tdKrdK);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tdVrdV);
    warpgroup_fence_operand(tdKrdK);
    pipeline.consumer_release(stage);
  }

  // dK and dV of the CTA's keys, this warpgroup's half of the columns (scale 1: GEMMA4.md).
  Tensor tKVcKV = thr_dkv.partition_C(make_identity_tensor(Shape<Int<N>, Int<Dh>>{}));
  const int64_t kv_offset = (int64_t(b) * s.kv_heads + kv_head()) * s.seq * D + consumer * Dh;
  T* dk = static_cast<T*>(p.args.dk) + kv_offset;
  T* dv = static_cast<T*>(p.args.dv) + kv_offset;
  CUTE_UNROLL
  for (int e = 0; e < size(tdKrdK); e += 2) {
    const int key = k0 + get<0>(tKVcKV(e));
    if (key >= s.seq) continue;
    const int64_t at = int64_t(key) * D + get<1>(tKVcKV(e));
    store_pair(dk + at, tdKrdK(e), tdKrdK(e + 1));
    store_pair(dv + at, tdVrdV(e), tdVrdV(e + 1));
  }
}

template <typename Tiles, typename Params>
__global__ void __launch_bounds__(Tiles::kThreads, 1) hopper_backward_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) unsigned char smem_bytes[];
  auto& smem = *reinterpret_cast<typename Tiles::SharedStorage*>(smem_bytes);
  using Pipeline = typename Tiles::Pipeline;
  const int warpgroup = threadIdx.x / kWarpgroupThreads;

  Pipeline pipeline(smem.pipeline, pipeline_params<Pipeline>(Tiles::kStageBytes, kConsumerThreads, 0),
                    Shape<_1, _1, _1>{});
  if (threadIdx.x == 0) cutlass::arch::ClusterTransactionBarrier::init(&smem.kv_loaded, 1);
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    if (threadIdx.x == 0) produce<Tiles>(p, smem, pipeline);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    consume<Tiles>(p, smem, pipeline);
  }
}

template <typename T, int D>
void launch(const AttentionBackwardArgs& a, cudaStream_t stream) {
  using Tiles = BackwardTiles<T, D>;
  const AttentionShape& s = a.shape;
  auto params = make_backward_params<Tiles, typename Tiles::SmemLayoutKV>(a);
  const dim3 grid(s.kv_heads, (s.seq + Tiles::kBlockN - 1) / Tiles::kBlockN, s.batch);
  launch_with_shared_storage<Tiles>(hopper_backward_kernel<Tiles, decltype(params)>, grid, params, stream);
}

// delta[b, h, i] = sum_d dO[b, i, h, d] O[b, i, h, d] in fp32: one warp a row, 16 bytes (8
// values) of each tensor a lane at a time. Its own kernel, one read of O and dO, rather than
// the four passes over [B, S, Hq, D] that fp32 casts, a product and a sum take in LibTorch (0.6 ms
// of a 3.8 ms sliding-layer step at S = 8192 on an H200).
template <typename T>
__global__ void attention_delta_kernel(const T* o, const T* dout, float* delta, AttentionShape s, int64_t rows) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int D = s.head_dim;
  float sum = 0.f;
  for (int d = lane * 8; d < D; d += 32 * 8) {
    const uint4 a = *reinterpret_cast<const uint4*>(o + row * D + d);
    const uint4 g = *reinterpret_cast<const uint4*>(dout + row * D + d);
    const T* x = reinterpret_cast<const T*>(&a);
    const T* y = reinterpret_cast<const T*>(&g);
    CUTE_UNROLL
    for (int j = 0; j < 8; ++j) sum += float(x[j]) * float(y[j]);
  }
  CUTE_UNROLL
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
  if (lane != 0) return;
  // row = (b * S + i) * Hq + h -> delta[(b * Hq + h) * S + i]
  const int64_t h = row % s.q_heads, i = (row / s.q_heads) % s.seq, b = row / (int64_t(s.q_heads) * s.seq);
  delta[(b * s.q_heads + h) * s.seq + i] = sum;
}

}  // namespace
}  // namespace gemma4::impl::cuda::hopper

namespace gemma4::impl::cuda {

const char* launch_attention_delta(AttentionDtype dtype, const AttentionShape& s, const void* o, const void* dout,
                                   float* delta, cudaStream_t stream) {
  if (s.head_dim % 8 != 0) return "attention delta: the head dim must be a multiple of 8";
  const int64_t rows = int64_t(s.batch) * s.seq * s.q_heads;
  const int blocks = int((rows * 32 + 255) / 256);
  if (dtype == AttentionDtype::kBFloat16) {
    hopper::attention_delta_kernel<<<blocks, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(o),
                                                               static_cast<const __nv_bfloat16*>(dout), delta, s, rows);
  } else {
    hopper::attention_delta_kernel<<<blocks, 256, 0, stream>>>(static_cast<const __half*>(o),
                                                               static_cast<const __half*>(dout), delta, s, rows);
  }
  return cuda_status(nullptr);
}

const char* launch_attention_backward(AttentionDtype dtype, const AttentionBackwardArgs& args, cudaStream_t stream) {
  const char* error = "";
  if (args.shape.head_dim == 512) {
    error = launch_attention_dkdv_512(dtype, args, stream);
  } else {
    const bool built = dispatch(dtype, args.shape.head_dim, [&](auto type_tag, auto dim_tag) {
      constexpr int D = decltype(dim_tag)::value;
      if constexpr (D != 512) hopper::launch<decltype(type_tag), D>(args, stream);
    });
    error = cuda_status(built ? nullptr : "attention backward: head dim not built (64, 256, 512)");
  }
  return *error != '\0' ? error : launch_attention_dq(dtype, args, stream);
}

}  // namespace gemma4::impl::cuda
