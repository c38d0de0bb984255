// dK and dV of the attention backward at head dim 512 on Hopper's own instructions (sm_90a); dQ is
// a separate kernel's. One CTA per 32 keys of one kv head, looping over the query heads of its
// group and the 64-query tiles inside the band (hopper_dkdv512_tiles.cuh has the shapes and why):
//   producer  (warpgroup 0): thread 0 loads K and V once, then Q of every step; thread 32 dO of
//             every step, each through its own one-stage pipeline;
//   consumer 0 (warpgroup 1): S = Q K^T (wgmma over all of D), P = exp(S - lse) with the mask on
//             band-edge tiles only, P to the exchange (fp32) and to shared memory (16-bit);
//   consumer 1 (warpgroup 2): dP = dO V^T, then dS = P (dP - delta) with P from the exchange;
//   both:     dV^T += dO^T P and dK^T += Q^T dS for their half of D, kept in registers, and at the
//             end dK and dV written once (deterministic: no atomics, no workspace).
// Scale 1 (GEMMA4.md); lse comes from the forward, delta = rowsum(dO * O) from launch_attention_delta.
//
// Reuse of the single buffers, step i to step i + 1, without extra barriers:
//  - sP and the exchange are written (by consumer 0) only after S of step i + 1, which needs Q of
//    step i + 1, which loads only after both consumers released Q of step i, each after all its
//    products of step i (which read sP and sdS) completed and after consumer 1 read the exchange;
//  - sdS is written (by consumer 1) only after the P-written barrier of step i + 1, which consumer
//    0 reaches only after that same S, hence after its own dK^T product of step i completed.
//  - Q and dO themselves are overwritten by TMA only after every consumer thread released them.
#include "impl/cuda/hopper_backward_launch.cuh"
#include "impl/cuda/hopper_dkdv512_tiles.cuh"

namespace gemma4::impl::cuda::hopper {
namespace {

// Named barriers (beyond CUTLASS's reserved ones): the two between the consumers of one step,
// and one per consumer warpgroup for its epilogue's staging.
constexpr uint32_t kPWrittenBarrier = 0, kDsWrittenBarrier = 1, kStagingBarrier = 2;
constexpr int kConsumerThreads = 2 * kWarpgroupThreads;
constexpr int kQProducer = 0, kDoutProducer = 32;  // the first thread of warps 0 and 1

// K and V of the CTA's keys, every half of D, on the kv_loaded mbarrier (rows past S: zeros).
template <typename Tiles, typename Params>
__device__ void produce_kv(const Params& p, typename Tiles::SharedStorage& smem) {
  constexpr int N = Tiles::kBlockN, Dh = Tiles::kDh;
  const AttentionShape& s = p.args.shape;
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Tiles::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Tiles::SmemLayoutKV{});
  Tensor mK = p.tma_k.get_tma_tensor(key_shape<Tiles>(s));
  Tensor mV = p.tma_v.get_tma_tensor(key_shape<Tiles>(s));
  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&smem.kv_loaded, Tiles::kKVBytes);
  CUTE_UNROLL
  for (int half = 0; half < Tiles::kHalves; ++half) {
    auto load_rows = [&](const auto& tma, const auto& m, auto& sm) {
      Tensor g =
          local_tile(m(_, _, half, kv_head(), blockIdx.z), Shape<Int<N>, Int<Dh>>{}, make_coord(key_block(), _0{}));
      auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sm), group_modes<0, 2>(g));
      copy(tma.with(smem.kv_loaded), tg, ts(_, half));
    };
    load_rows(p.tma_k, mK, sK);
    load_rows(p.tma_v, mV, sV);
  }
}

// One producer thread: the Q (or dO) tile of every step, every half of D on the stage's barrier.
// Query rows past S are zero-filled by TMA.
template <typename Tiles, typename Tma>
__device__ void produce_tiles(const Tma& tma, typename Tiles::Element* tile, typename Tiles::Pipeline& pipeline,
                              const AttentionShape& s) {
  constexpr int M = Tiles::kBlockM, Dh = Tiles::kDh;
  Tensor sT = make_tensor(make_smem_ptr(tile), typename Tiles::SmemLayoutQ{});
  Tensor mT = tma.get_tma_tensor(query_shape<Tiles>(s));
  const Steps steps = steps_of<Tiles>(s);
  auto stage = cutlass::make_producer_start_state<typename Tiles::Pipeline>();
  for (int i = 0; i < steps.count; ++i, ++stage) {
    pipeline.producer_acquire(stage);
    auto* full = pipeline.producer_get_barrier(stage);
    CUTE_UNROLL
    for (int half = 0; half < Tiles::kHalves; ++half) {
      Tensor g = local_tile(mT(_, _, half, steps.head(i), blockIdx.z), Shape<Int<M>, Int<Dh>>{},
                            make_coord(steps.tile(i), _0{}));
      auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sT), group_modes<0, 2>(g));
      copy(tma.with(*full), tg, ts(_, half));
    }
  }
}

template <typename Tiles, typename Params>
__device__ void consume(const Params& p, typename Tiles::SharedStorage& smem, typename Tiles::Pipeline& q_pipeline,
                        typename Tiles::Pipeline& dout_pipeline) {
  constexpr int M = Tiles::kBlockM, N = Tiles::kBlockN, Dh = Tiles::kDh, D = Tiles::D;
  using Element = typename Tiles::Element;
  using T = CudaElement<Element>;
  const AttentionShape& s = p.args.shape;
  const int b = blockIdx.z, k0 = key_block() * N;
  const int consumer = threadIdx.x / kWarpgroupThreads - 1, thread = threadIdx.x % kWarpgroupThreads;
  const bool scores = consumer == 0;  // S and P here; dP and dS on the other consumer
  const int32_t* valid = p.args.key_valid ? p.args.key_valid + int64_t(b) * s.seq : nullptr;
  const Steps steps = steps_of<Tiles>(s);

  // S = Q K^T here, dP = dO V^T on the other side: the same product on other tiles.
  Tensor sA = make_tensor(make_smem_ptr(scores ? smem.q.data() : smem.dout.data()), typename Tiles::SmemLayoutQ{});
  Tensor sB = make_tensor(make_smem_ptr(scores ? smem.k.data() : smem.v.data()), typename Tiles::SmemLayoutKV{});
  Tensor sQt = make_tensor(make_smem_ptr(smem.q.data()), typename Tiles::SmemLayoutQt{});
  Tensor sdOt = make_tensor(make_smem_ptr(smem.dout.data()), typename Tiles::SmemLayoutQt{});
  Tensor sP = make_tensor(make_smem_ptr(smem.p.data()), typename Tiles::SmemLayoutP{});
  Tensor sdS = make_tensor(make_smem_ptr(smem.ds.data()), typename Tiles::SmemLayoutP{});
  Tensor sPt = make_tensor(make_smem_ptr(smem.p.data()), typename Tiles::SmemLayoutPt{});
  Tensor sdSt = make_tensor(make_smem_ptr(smem.ds.data()), typename Tiles::SmemLayoutPt{});

  typename Tiles::MmaSdP mma_sdp;
  auto thr_sdp = mma_sdp.get_thread_slice(thread);
  Tensor tSrA = thr_sdp.partition_fragment_A(sA);  // (.., .., k blocks, halves)
  Tensor tSrB = thr_sdp.partition_fragment_B(sB);
  Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<M>, Int<N>>{});  // S, or dP on consumer 1
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  const auto by_rc = rows_by_columns(tSrS.layout());  // (row, column) -> register, the exchange's order
  Tensor S = make_tensor(tSrS.data(), by_rc);
  Tensor cS = make_tensor(tScS.data(), rows_by_columns(tScS.layout()));
  constexpr int R = size<0>(S), C = size<1>(S);  // queries, keys a thread holds

  // dV^T and dK^T: this warpgroup's half of D (rows), the CTA's 32 keys (columns).
  typename Tiles::MmaDkv mma_dkv;
  auto thr_dkv = mma_dkv.get_thread_slice(thread);
  Tensor tKVrdOt = thr_dkv.partition_fragment_A(sdOt);  // (.., .., k blocks, halves)
  Tensor tKVrQt = thr_dkv.partition_fragment_A(sQt);
  Tensor tKVrP = thr_dkv.partition_fragment_B(sPt);  // (.., .., k blocks)
  Tensor tKVrdS = thr_dkv.partition_fragment_B(sdSt);
  Tensor tdVrdV = partition_fragment_C(mma_dkv, Shape<Int<Dh>, Int<N>>{});
  Tensor tdKrdK = partition_fragment_C(mma_dkv, Shape<Int<Dh>, Int<N>>{});
  static_assert(size(tdVrdV) == 64 && size(tSrS) == 16, "dV^T + dK^T: 128 registers a thread, S (dP): 16");
  clear(tdVrdV);
  clear(tdKrdK);
  auto issue_dv = [&] { wgmma_issue<false>(mma_dkv, tKVrdOt(_, _, _, consumer), tKVrP, tdVrdV); };
  auto issue_dk = [&] { wgmma_issue<false>(mma_dkv, tKVrQt(_, _, _, consumer), tKVrdS, tdKrdK); };

  cutlass::arch::ClusterBarrier::wait(&smem.kv_loaded, 0);
  typename Tiles::Pipeline::PipelineState stage;  // both pipelines advance once a step
  for (int i = 0; i < steps.count; ++i, ++stage) {
    const int head = steps.head(i), q0 = steps.tile(i) * M;
    if (scores) {
      q_pipeline.consumer_wait(stage);
    } else {
      dout_pipeline.consumer_wait(stage);
    }
    wgmma_issue<true>(mma_sdp, tSrA(_, _, _, 0), tSrB(_, _, _, 0), tSrS);
    wgmma_issue<false>(mma_sdp, tSrA(_, _, _, 1), tSrB(_, _, _, 1), tSrS);

    // This side's statistic of its rows, read while the products run: lse (in log2 units) or
    // delta. A query past the end gets lse = +inf (P = 0) and delta = 0; a row that saw no key in
    // the forward has lse = +inf already.
    const int64_t stats = (int64_t(b) * s.q_heads + head) * s.seq;
    float stat[R];
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) {
      const int q = q0 + get<0>(cS(r, 0));
      stat[r] = q >= s.seq ? (scores ? INFINITY : 0.f)
                           : (scores ? p.args.lse[stats + q] * tile::kLog2e : p.args.delta[stats + q]);
    }
    warpgroup_wait<0>();
    fence_operands(tSrA, tSrS);

    float* exchange = smem.exchange.data() + thread;  // register j of this thread at [j * 128]
    if (scores) {
      const bool unmasked = tile_unmasked(s, valid, q0, M, k0, N, /*rows_are_queries=*/true);
      CUTE_UNROLL
      for (int r = 0; r < R; ++r) {
        CUTE_UNROLL
        for (int c = 0; c < C; ++c) {
          const bool in = unmasked || allowed(s, valid, q0 + get<0>(cS(r, c)), k0 + get<1>(cS(r, c)));
          S(r, c) = in ? exp2f(S(r, c) * tile::kLog2e - stat[r]) : 0.f;
          exchange[by_rc(r, c) * kWarpgroupThreads] = S(r, c);
        }
        CUTE_UNROLL
        for (int c = 0; c < C; c += 2) {
          T* at = reinterpret_cast<T*>(raw_pointer_cast(&sP(get<0>(cS(r, c)), get<1>(cS(r, c)))));
          store_pair(at, S(r, c), S(r, c + 1));
        }
      }
      cutlass::arch::fence_view_async_shared();  // sP, before wgmma reads it
      cutlass::arch::NamedBarrier::sync(kConsumerThreads, kPWrittenBarrier);
      dout_pipeline.consumer_wait(stage);
      issue_dv();  // runs while the other side computes dS
      cutlass::arch::NamedBarrier::sync(kConsumerThreads, kDsWrittenBarrier);
      issue_dk();
    } else {
      cutlass::arch::NamedBarrier::sync(kConsumerThreads, kPWrittenBarrier);
      issue_dv();  // runs while this side computes dS
      CUTE_UNROLL
      for (int r = 0; r < R; ++r) {
        CUTE_UNROLL
        for (int c = 0; c < C; ++c) S(r, c) = exchange[by_rc(r, c) * kWarpgroupThreads] * (S(r, c) - stat[r]);
        CUTE_UNROLL
        for (int c = 0; c < C; c += 2) {
          T* at = reinterpret_cast<T*>(raw_pointer_cast(&sdS(get<0>(cS(r, c)), get<1>(cS(r, c)))));
          store_pair(at, S(r, c), S(r, c + 1));
        }
      }
      cutlass::arch::fence_view_async_shared();  // sdS, before wgmma reads it
      cutlass::arch::NamedBarrier::sync(kConsumerThreads, kDsWrittenBarrier);
      q_pipeline.consumer_wait(stage);
      issue_dk();
    }
    // dO is free once dV^T is done (the next dO loads while dK^T runs), Q once dK^T is.
    warpgroup_wait<1>();
    warpgroup_fence_operand(tdVrdV);
    dout_pipeline.consumer_release(stage);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tdKrdK);
    q_pipeline.consumer_release(stage);
  }

  // dV, then dK, of the CTA's keys and this warpgroup's 256 columns: the transposed accumulator
  // (column d, key) goes to a (keys, columns) staging tile in shared memory, which is then copied
  // out 16 bytes a thread, a warp one 512-byte row of a key. The staging reuses this warpgroup's
  // own K (consumer 0) or V (consumer 1) tile, which only its S (dP) products read, all completed.
  Element* staging = scores ? smem.k.data() : smem.v.data();
  Tensor tKVcKV = thr_dkv.partition_C(make_identity_tensor(Shape<Int<Dh>, Int<N>>{}));
  const int64_t kv_row0 = (int64_t(b) * s.kv_heads + kv_head()) * s.seq + k0;
  auto write_out = [&](const auto& acc, void* out) {
    CUTE_UNROLL
    for (int e = 0; e < size(acc); ++e) {
      staging[get<1>(tKVcKV(e)) * Tiles::kStageRow + get<0>(tKVcKV(e))] = Element(acc(e));
    }
    cutlass::arch::NamedBarrier::sync(kWarpgroupThreads, kStagingBarrier + consumer);
    constexpr int kChunks = Dh / 8;  // 16-byte chunks of a key's row
    CUTE_UNROLL
    for (int j = 0; j < N * kChunks / kWarpgroupThreads; ++j) {
      const int idx = j * kWarpgroupThreads + thread, key = idx / kChunks, chunk = idx % kChunks;
      if (k0 + key >= s.seq) continue;
      const uint4 v = *reinterpret_cast<const uint4*>(staging + key * Tiles::kStageRow + chunk * 8);
      *reinterpret_cast<uint4*>(static_cast<T*>(out) + (kv_row0 + key) * D + consumer * Dh + chunk * 8) = v;
    }
    cutlass::arch::NamedBarrier::sync(kWarpgroupThreads, kStagingBarrier + consumer);  // before restaging
  };
  write_out(tdVrdV, p.args.dv);
  write_out(tdKrdK, p.args.dk);
}

template <typename Tiles, typename Params>
__global__ void __launch_bounds__(Tiles::kThreads, 1) hopper_dkdv512_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) unsigned char smem_bytes[];
  auto& smem = *reinterpret_cast<typename Tiles::SharedStorage*>(smem_bytes);
  using Pipeline = typename Tiles::Pipeline;
  const int warpgroup = threadIdx.x / kWarpgroupThreads;

  Pipeline q_pipeline(smem.q_pipeline, pipeline_params<Pipeline>(Tiles::kTileBytes, kConsumerThreads, kQProducer),
                      Shape<_1, _1, _1>{});
  Pipeline dout_pipeline(smem.dout_pipeline,
                         pipeline_params<Pipeline>(Tiles::kTileBytes, kConsumerThreads, kDoutProducer),
                         Shape<_1, _1, _1>{});
  if (threadIdx.x == 0) cutlass::arch::ClusterTransactionBarrier::init(&smem.kv_loaded, 1);
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    if (threadIdx.x == kQProducer) {
      produce_kv<Tiles>(p, smem);
      produce_tiles<Tiles>(p.tma_q, smem.q.data(), q_pipeline, p.args.shape);
    } else if (threadIdx.x == kDoutProducer) {
      produce_tiles<Tiles>(p.tma_dout, smem.dout.data(), dout_pipeline, p.args.shape);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    consume<Tiles>(p, smem, q_pipeline, dout_pipeline);
  }
}

template <typename T>
void launch(const AttentionBackwardArgs& a, cudaStream_t stream) {
  using Tiles = Dkdv512Tiles<T>;
  const AttentionShape& s = a.shape;
  auto params = make_backward_params<Tiles, typename Tiles::SmemLayoutKV>(a);
  const dim3 grid(s.kv_heads, (s.seq + Tiles::kBlockN - 1) / Tiles::kBlockN, s.batch);
  launch_with_shared_storage<Tiles>(hopper_dkdv512_kernel<Tiles, decltype(params)>, grid, params, stream);
}

}  // namespace
}  // namespace gemma4::impl::cuda::hopper

namespace gemma4::impl::cuda {

const char* launch_attention_dkdv_512(AttentionDtype dtype, const AttentionBackwardArgs& args, cudaStream_t stream) {
  if (args.shape.head_dim != 512) return cuda_status("attention dK/dV 512: head dim is not 512");
  if (args.shape.seq <= 0 || args.shape.batch <= 0 || args.shape.kv_heads <= 0) return cuda_status(nullptr);
  if (dtype == AttentionDtype::kBFloat16) {
    hopper::launch<__nv_bfloat16>(args, stream);
  } else {
    hopper::launch<__half>(args, stream);
  }
  return cuda_status(nullptr);
}

}  // namespace gemma4::impl::cuda
