// The dQ pass of the attention backward on Hopper (sm_90a): one CTA per block of query rows of one
// head, walking the key tiles of its band as the forward does (hopper_dq_tiles.cuh has the shapes
// and why dQ has a pass of its own):
//   producer  (warpgroup 0): one thread loads Q and dO once, then the K tiles; another the V tiles,
//             each through its own pipeline of full/empty mbarriers;
//   consumers (warpgroups 1 and 2): S = Q K^T and dP = dO V^T (wgmma from shared memory),
//             P = exp(S - lse) with the mask on band-edge tiles only, dS = P (dP - delta),
//             dQ += dS K (wgmma, dS from registers); dQ stays in registers and is written once.
// dK and dV come from the key-major pass (hopper_attention_backward.cu, and for head dim 512
// hopper_attention_dkdv512.cu). Nothing is added in memory: both passes are deterministic.
#include "impl/cuda/hopper_backward_launch.cuh"
#include "impl/cuda/hopper_dq_tiles.cuh"

namespace gemma4::impl::cuda::hopper {
namespace {

// Named barrier (beyond CUTLASS's reserved ones) of the D split's swap.
constexpr uint32_t kSwapBarrier = 0;

// The CTA's query block, head and batch row. Blocks are taken last first, so that under a causal
// mask the longest rows start first and the short ones fill the tail.
__device__ inline int query_block() { return gridDim.x - 1 - blockIdx.x; }
__device__ inline int query_head() { return blockIdx.y; }
__device__ inline int batch_row() { return blockIdx.z; }

template <typename Tiles>
__device__ TileRange band_of_block(const AttentionShape& s) {
  return band_tiles(s, query_block() * Tiles::kBlockM, Tiles::kBlockM, Tiles::kBlockN, /*rows_are_queries=*/true);
}

template <typename Tiles, typename Params>
__device__ void consume(const Params& p, typename Tiles::SharedStorage& smem, typename Tiles::KPipeline& k_pipeline,
                        typename Tiles::VPipeline& v_pipeline) {
  constexpr int N = Tiles::kBlockN, Dh = Tiles::kDh, kHalves = Tiles::kHalves;
  using Element = typename Tiles::Element;
  using T = CudaElement<Element>;
  const AttentionShape& s = p.args.shape;
  const int h = query_head(), b = batch_row();
  const int consumer = threadIdx.x / kWarpgroupThreads - 1, thread = threadIdx.x % kWarpgroupThreads;
  // The row split: this consumer's 64 rows over all of D. The D split: the CTA's 64 rows; consumer
  // 0 computes S, consumer 1 dP, and each owns dQ's columns [Dh * consumer, +Dh).
  const int half = kHalves == 2 ? consumer : 0;
  const bool computes_s = kHalves == 1 || consumer == 0;
  const bool computes_dp = kHalves == 1 || consumer == 1;
  const int q0 = query_block() * Tiles::kBlockM + (kHalves == 2 ? 0 : 64 * consumer);
  const int32_t* valid = p.args.key_valid ? p.args.key_valid + int64_t(b) * s.seq : nullptr;

  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Tiles::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename Tiles::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Tiles::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Tiles::SmemLayoutV{});
  Tensor sKt = make_tensor(make_smem_ptr(smem.k.data()), typename Tiles::SmemLayoutKt{});
  auto my_rows = Shape<_64, Int<Dh>, Int<kHalves>>{};
  const int row_tile = kHalves == 2 ? 0 : consumer;
  typename Tiles::MmaS mma_s;
  typename Tiles::MmaDq mma_dq;
  auto thr_s = mma_s.get_thread_slice(thread);
  auto thr_dq = mma_dq.get_thread_slice(thread);
  Tensor tSrQ = thr_s.partition_fragment_A(local_tile(sQ, my_rows, make_coord(row_tile, _0{}, _0{})));  // (.., halves)
  Tensor tSrdO = thr_s.partition_fragment_A(local_tile(sdO, my_rows, make_coord(row_tile, _0{}, _0{})));
  Tensor tSrK = thr_s.partition_fragment_B(sK);  // (.., .., k blocks, slots)
  Tensor tSrV = thr_s.partition_fragment_B(sV);  // (.., .., k blocks, halves)
  Tensor tQrKt = thr_dq.partition_fragment_B(sKt);
  Tensor tSrS = partition_fragment_C(mma_s, Shape<_64, Int<N>>{});
  Tensor tSrdP = partition_fragment_C(mma_s, Shape<_64, Int<N>>{});
  Tensor tQrdQ = partition_fragment_C(mma_dq, Shape<_64, Int<Dh>>{});
  clear(tQrdQ);
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<_64, Int<N>>{}));
  Tensor cS = make_tensor(tScS.data(), rows_by_columns(tScS.layout()));
  Tensor S = make_tensor(tSrS.data(), rows_by_columns(tSrS.layout()));
  Tensor dP = make_tensor(tSrdP.data(), rows_by_columns(tSrdP.layout()));
  constexpr int R = size<0>(S);

  // The statistics of this thread's rows. A row past the end gets lse = +inf (P = 0); a row that
  // saw no key in the forward has lse = +inf already.
  float lse[R], delta[R];
  CUTE_UNROLL
  for (int r = 0; r < R; ++r) {
    const int q = q0 + get<0>(cS(r, 0));
    const int64_t at = (int64_t(b) * s.q_heads + h) * s.seq + q;
    lse[r] = q < s.seq ? p.args.lse[at] * tile::kLog2e : INFINITY;
    delta[r] = q < s.seq ? p.args.delta[at] : 0.f;
  }

  // The D split's swap: consumer 0 gives P and takes dP, consumer 1 the reverse, into `taken` (not
  // into an accumulator: a non-wgmma write to one would serialize the wgmmas). No second barrier
  // before the next tile's writes: with one K stage (static_assert) the next S waits for the next
  // K tile, which loads only after both consumers released this one, after their reads below.
  Tensor tSrX = make_tensor_like(tSrS);
  Tensor taken = make_tensor(tSrX.data(), S.layout());
  auto swap = [&] {
    if constexpr (kHalves == 2) {
      static_assert(Tiles::kKStages == 1, "the swap's single barrier relies on one K stage");
      float* mine = smem.swap.data() + consumer * 64 * N;
      const float* other = smem.swap.data() + (1 - consumer) * 64 * N;
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) mine[i * kWarpgroupThreads + thread] = consumer == 0 ? tSrS(i) : tSrdP(i);
      cutlass::arch::NamedBarrier::sync(2 * kWarpgroupThreads, kSwapBarrier);
      CUTE_UNROLL
      for (int i = 0; i < size(tSrX); ++i) tSrX(i) = other[i * kWarpgroupThreads + thread];
    }
  };
  Tensor rdS = make_tensor_like<Element>(tSrS);
  Tensor dS = make_tensor(rdS.data(), S.layout());
  Tensor tQrdS = make_tensor(rdS.data(), as_a_operand(rdS.layout()));

  const TileRange tiles = band_of_block<Tiles>(s);
  typename Tiles::KPipeline::PipelineState k_stage;
  typename Tiles::VPipeline::PipelineState v_stage;
  for (int n = tiles.first; n <= tiles.last; ++n, ++k_stage) {
    const int k0 = n * N, k_slot = k_stage.index() * kHalves;
    k_pipeline.consumer_wait(k_stage);  // both consumers: dQ reads K too
    if (computes_s) {
      CUTE_UNROLL
      for (int d = 0; d < kHalves; ++d) {
        if (d == 0) wgmma_issue<true>(mma_s, tSrQ(_, _, _, d), tSrK(_, _, _, k_slot + d), tSrS);
        else wgmma_issue<false>(mma_s, tSrQ(_, _, _, d), tSrK(_, _, _, k_slot + d), tSrS);
      }
    }
    if (computes_dp) {
      v_pipeline.consumer_wait(v_stage);
      CUTE_UNROLL
      for (int d = 0; d < kHalves; ++d) {
        if (d == 0) wgmma_issue<true>(mma_s, tSrdO(_, _, _, d), tSrV(_, _, _, d), tSrdP);
        else wgmma_issue<false>(mma_s, tSrdO(_, _, _, d), tSrV(_, _, _, d), tSrdP);
      }
    }
    warpgroup_wait<0>();
    fence_operands(tSrQ, tSrS);
    fence_operands(tSrdO, tSrdP);
    if (computes_dp) {
      v_pipeline.consumer_release(v_stage);
      ++v_stage;
    }
    if (computes_s) {  // P in place of S, masked only where the tile crosses the band's edge
      const bool unmasked = tile_unmasked(s, valid, q0, 64, k0, N, /*rows_are_queries=*/true);
      CUTE_UNROLL
      for (int r = 0; r < R; ++r) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(S); ++c) {
          const bool in = unmasked || allowed(s, valid, q0 + get<0>(cS(r, c)), k0 + get<1>(cS(r, c)));
          S(r, c) = in ? exp2f(S(r, c) * tile::kLog2e - lse[r]) : 0.f;
        }
      }
    }
    swap();
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) {
        const float p_rc = computes_s ? S(r, c) : taken(r, c);
        const float dp_rc = computes_dp ? dP(r, c) : taken(r, c);
        dS(r, c) = Element(p_rc * (dp_rc - delta[r]));
      }
    }
    wgmma_issue<false>(mma_dq, tQrdS, tQrKt(_, _, _, k_slot + half), tQrdQ);
    warpgroup_wait<0>();
    fence_operands(tQrdS, tQrdQ);
    k_pipeline.consumer_release(k_stage);
  }

  // dQ of this thread's rows and columns (scale 1: GEMMA4.md).
  Tensor tQcdQ = thr_dq.partition_C(make_identity_tensor(Shape<_64, Int<Dh>>{}));
  Tensor dQ = make_tensor(tQrdQ.data(), rows_by_columns(tQrdQ.layout()));
  Tensor cdQ = make_tensor(tQcdQ.data(), rows_by_columns(tQcdQ.layout()));
  T* dq = static_cast<T*>(p.args.dq);
  CUTE_UNROLL
  for (int r = 0; r < size<0>(dQ); ++r) {
    const int row = q0 + get<0>(cdQ(r, 0));
    if (row >= s.seq) continue;
    T* dq_row = dq + ((int64_t(b) * s.seq + row) * s.q_heads + h) * Tiles::D + half * Dh;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(dQ); c += 2) store_pair(dq_row + get<1>(cdQ(r, c)), dQ(r, c), dQ(r, c + 1));
  }
}

template <typename Tiles, typename Params>
__global__ void __launch_bounds__(Tiles::kThreads, 1) hopper_dq_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) unsigned char smem_bytes[];
  auto& smem = *reinterpret_cast<typename Tiles::SharedStorage*>(smem_bytes);
  using KPipeline = typename Tiles::KPipeline;
  using VPipeline = typename Tiles::VPipeline;
  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  constexpr int kKProducer = 0, kVProducer = 32;  // the first thread of warps 0 and 1
  constexpr int kConsumers = Tiles::kThreads - kWarpgroupThreads;
  // V is read by both consumers in the row split, by consumer 1 (dP) alone in the D split.
  constexpr int kVConsumers = Tiles::kHalves == 2 ? kWarpgroupThreads : kConsumers;

  KPipeline k_pipeline(smem.k_pipeline, pipeline_params<KPipeline>(Tiles::kKeyTileBytes, kConsumers, kKProducer),
                       Shape<_1, _1, _1>{});
  VPipeline v_pipeline(smem.v_pipeline, pipeline_params<VPipeline>(Tiles::kKeyTileBytes, kVConsumers, kVProducer),
                       Shape<_1, _1, _1>{});
  if (threadIdx.x == 0) cutlass::arch::ClusterTransactionBarrier::init(&smem.rows_loaded, 1);
  __syncthreads();

  const AttentionShape& s = p.args.shape;
  const int kv_head = query_head() / (s.q_heads / s.kv_heads);
  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    if (threadIdx.x == kKProducer) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&smem.rows_loaded, Tiles::kRowsBytes);
      using Q = typename Tiles::SmemLayoutQ;
      load_query_rows<Tiles, Q>(p.tma_q, smem.q.data(), smem.rows_loaded, s, query_block(), query_head(), batch_row());
      load_query_rows<Tiles, Q>(p.tma_dout, smem.dout.data(), smem.rows_loaded, s, query_block(), query_head(),
                                batch_row());
      auto stage = cutlass::make_producer_start_state<KPipeline>();
      load_key_tiles<Tiles, typename Tiles::SmemLayoutK>(p.tma_k, smem.k.data(), k_pipeline, stage, s, kv_head,
                                                         batch_row(), band_of_block<Tiles>(s));
    } else if (threadIdx.x == kVProducer) {
      auto stage = cutlass::make_producer_start_state<VPipeline>();
      load_key_tiles<Tiles, typename Tiles::SmemLayoutV>(p.tma_v, smem.v.data(), v_pipeline, stage, s, kv_head,
                                                         batch_row(), band_of_block<Tiles>(s));
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    cutlass::arch::ClusterBarrier::wait(&smem.rows_loaded, 0);
    consume<Tiles>(p, smem, k_pipeline, v_pipeline);
  }
}

template <typename T, int D>
void launch(const AttentionBackwardArgs& a, cudaStream_t stream) {
  using Tiles = DqTiles<T, D>;
  const AttentionShape& s = a.shape;
  auto params = make_backward_params<Tiles, typename Tiles::SmemLayoutV>(a);
  const dim3 grid((s.seq + Tiles::kBlockM - 1) / Tiles::kBlockM, s.q_heads, s.batch);
  launch_with_shared_storage<Tiles>(hopper_dq_kernel<Tiles, decltype(params)>, grid, params, stream);
}

}  // namespace
}  // namespace gemma4::impl::cuda::hopper

namespace gemma4::impl::cuda {

const char* launch_attention_dq(AttentionDtype dtype, const AttentionBackwardArgs& args, cudaStream_t stream) {
  const bool built = dispatch(dtype, args.shape.head_dim, [&](auto type_tag, auto dim_tag) {
    hopper::launch<decltype(type_tag), decltype(dim_tag)::value>(args, stream);
  });
  return cuda_status(built ? nullptr : "attention backward (dQ): head dim not built (64, 256, 512)");
}

}  // namespace gemma4::impl::cuda
