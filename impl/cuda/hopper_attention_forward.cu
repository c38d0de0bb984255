// Attention forward on Hopper's own instructions (sm_90a): TMA loads, wgmma, a producer warpgroup
// and two consumer warpgroups (FlashAttention-3's organisation, written for this project's layouts
// and band mask; scale 1, GEMMA4.md). Persistent: one CTA per SM takes work tiles (a block of query
// rows of one head; hopper_forward_tiles.cuh has the shapes and how the consumers split the work)
// from a global counter until none is left, so that
//  - the next tile's Q and first K/V tiles load while the consumers finish this one's last P V and
//    write its output, instead of the SM idling between one CTA's exit and the next one's loads;
//  - tiles of unequal length (a causal mask) still balance: a CTA that finishes early takes more.
// The producer thread that loads Q takes the next tile's index from the counter and writes it to
// shared memory before Q's load completes the q_loaded barrier, so the index rides with Q.
//   producer  (warpgroup 0): one thread loads Q and the K tiles that intersect the band, another
//             the V tiles, each through its own pipeline of full/empty mbarriers;
//   consumers (warpgroups 1 and 2): S = Q K^T (wgmma, both operands in shared memory), a mask on
//             band-edge tiles only, online softmax in fp32, O += P V (wgmma, P from registers).
//             The product S of the next tile is issued before this tile's P V and the softmax runs
//             while P V does (FlashAttention-3's intra-warpgroup overlap). O / l and the
//             log-sum-exp are written straight from registers.
#include "impl/cuda/hopper_forward_tiles.cuh"

namespace gemma4::impl::cuda::hopper {
namespace {

template <typename TmaQ, typename TmaKV>
struct ForwardParams {
  AttentionForwardArgs args;
  TmaQ tma_q;
  TmaKV tma_k, tma_v;
  int query_blocks;  // of kBlockM rows; the work tiles are query_blocks x q_heads x batch
  int tile_count;
};

// One work tile: a block of query rows of one head of one batch row.
struct WorkTile {
  int block, head, batch;
};
// Tile t of the work queue. Query blocks vary fastest, so the CTAs that run at the same time read
// neighbouring (mostly the same) K/V tiles from L2; they are taken last block first, so that under
// a causal mask the longest rows start first and the short ones fill the tail.
__device__ inline WorkTile work_tile(int t, int query_blocks, int q_heads) {
  const int block = query_blocks - 1 - t % query_blocks;
  t /= query_blocks;
  return {block, t % q_heads, t / q_heads};
}

// Named barrier (beyond CUTLASS's reserved ones) of the D split's score exchange.
constexpr uint32_t kExchangeBarrier = 0;

template <typename Tiles, typename Params>
__device__ void produce_q(const Params& p, typename Tiles::SharedStorage& smem, WorkTile w) {
  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&smem.q_loaded, Tiles::kQBytes);
  load_query_rows<Tiles, typename Tiles::SmemLayoutQ>(p.tma_q, smem.q.data(), smem.q_loaded, p.args.shape, w.block,
                                                      w.head, w.batch);
}

// One work tile, whose Q has landed. `stage` carries on from one work tile to the next.
template <typename Tiles, typename Params>
__device__ void consume(const Params& p, typename Tiles::SharedStorage& smem, typename Tiles::Pipeline& k_pipeline,
                        typename Tiles::Pipeline& v_pipeline, typename Tiles::Pipeline::PipelineState& stage,
                        WorkTile w, TileRange tiles) {
  constexpr int N = Tiles::kBlockN, Dh = Tiles::kDh, kHalves = Tiles::kHalves;
  using Element = typename Tiles::Element;
  using T = CudaElement<Element>;
  const AttentionShape& s = p.args.shape;
  const int h = w.head, b = w.batch, consumer = threadIdx.x / kWarpgroupThreads - 1;
  const int thread = threadIdx.x % kWarpgroupThreads;
  // This warpgroup's share: the row split takes rows 64 * consumer.., the D split columns Dh * consumer..
  const int half = kHalves == 2 ? consumer : 0;
  const int q0 = w.block * Tiles::kBlockM + (kHalves == 2 ? 0 : 64 * consumer);
  const int32_t* valid = p.args.key_valid ? p.args.key_valid + int64_t(b) * s.seq : nullptr;

  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Tiles::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Tiles::SmemLayoutKV{});
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename Tiles::SmemLayoutVt{});
  Tensor sQw = local_tile(sQ(_, _, half), Shape<_64, Int<Dh>>{}, make_coord(kHalves == 2 ? 0 : consumer, _0{}));
  typename Tiles::MmaS mma_s;
  typename Tiles::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(thread);
  auto thr_o = mma_o.get_thread_slice(thread);
  Tensor tSrQ = thr_s.partition_fragment_A(sQw);  // wgmma descriptors of shared memory
  Tensor tSrK = thr_s.partition_fragment_B(sK);   // (.., .., k blocks, slots)
  Tensor tOrV = thr_o.partition_fragment_B(sVt);  // (.., .., k blocks, slots)
  Tensor tSrS = partition_fragment_C(mma_s, Shape<_64, Int<N>>{});
  Tensor tOrO = partition_fragment_C(mma_o, Shape<_64, Int<Dh>>{});
  clear(tOrO);
  // (row, column) of every accumulator element, and the accumulators as (rows, columns).
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<_64, Int<N>>{}));
  Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<_64, Int<Dh>>{}));
  Tensor S = make_tensor(tSrS.data(), rows_by_columns(tSrS.layout()));
  Tensor O = make_tensor(tOrO.data(), rows_by_columns(tOrO.layout()));
  Tensor cO = make_tensor(tOcO.data(), rows_by_columns(tOcO.layout()));
  constexpr int R = size<0>(S);
  float m[R], l[R], rescale[R];
  CUTE_UNROLL
  for (int r = 0; r < R; ++r) m[r] = -INFINITY, l[r] = 0.f;

  // The D split: add the other consumer's partial scores (both sides hold the same elements in
  // the same registers, so the exchange is element for element).
  auto exchange = [&] {
    if constexpr (kHalves == 2) {
      float* mine = smem.partial_scores.data() + consumer * 64 * N;
      float* other = smem.partial_scores.data() + (1 - consumer) * 64 * N;
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) mine[i * kWarpgroupThreads + thread] = tSrS(i);
      cutlass::arch::NamedBarrier::sync(2 * kWarpgroupThreads, kExchangeBarrier);
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) tSrS(i) += other[i * kWarpgroupThreads + thread];
      cutlass::arch::NamedBarrier::sync(2 * kWarpgroupThreads, kExchangeBarrier);  // before the next write
    }
  };
  // Masks tile n (only where it crosses the band's edge, padding or the sequence end), then the
  // online softmax: rescale[r] is what O's row r must be multiplied by once the P V in flight is
  // done. A row with no allowed key so far keeps m = -inf and uses 0 as its reference, so exp
  // gives 0 and never NaN.
  auto softmax = [&](int n) {
    const int k0 = n * N;
    if (!tile_unmasked(s, valid, q0, 64, k0, N, /*rows_are_queries=*/true)) {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i)
        if (!allowed(s, valid, q0 + get<0>(tScS(i)), k0 + get<1>(tScS(i)))) tSrS(i) = -INFINITY;
    }
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) {
      float mx = -INFINITY;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) mx = fmaxf(mx, S(r, c));
      const float m_new = fmaxf(m[r], quad_max(mx));
      const float ref = m_new == -INFINITY ? 0.f : m_new * tile::kLog2e;
      rescale[r] = exp2f(m[r] * tile::kLog2e - ref);
      m[r] = m_new;
      float sum = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) {
        S(r, c) = exp2f(S(r, c) * tile::kLog2e - ref);
        sum += S(r, c);
      }
      l[r] = l[r] * rescale[r] + sum;  // this thread's part of the row; the quad is summed at the end
    }
  };
  Tensor rP = make_tensor_like<Element>(tSrS);
  Tensor tOrP = make_tensor(rP.data(), as_a_operand(rP.layout()));
  auto to_p = [&] {
    CUTE_UNROLL
    for (int i = 0; i < size(tSrS); ++i) rP(i) = Element(tSrS(i));
  };
  auto slot = [&](const auto& stage) { return stage.index() * kHalves + half; };

  // `stage`: of the tile whose P V is next.
  k_pipeline.consumer_wait(stage);
  wgmma_issue<true>(mma_s, tSrQ, tSrK(_, _, _, slot(stage)), tSrS);
  warpgroup_wait<0>();
  fence_operands(tSrQ, tSrS);
  k_pipeline.consumer_release(stage);
  exchange();
  softmax(tiles.first);
  to_p();
  for (int n = tiles.first + 1; n <= tiles.last; ++n) {
    auto next = stage;
    ++next;
    k_pipeline.consumer_wait(next);
    wgmma_issue<true>(mma_s, tSrQ, tSrK(_, _, _, slot(next)), tSrS);
    v_pipeline.consumer_wait(stage);
    wgmma_issue<false>(mma_o, tOrP, tOrV(_, _, _, slot(stage)), tOrO);
    warpgroup_wait<1>();  // S of tile n is done; P V of tile n - 1 may still run
    fence_operands(tSrQ, tSrS);
    k_pipeline.consumer_release(next);
    exchange();
    softmax(n);
    warpgroup_wait<0>();
    fence_operands(tOrP, tOrO);
    v_pipeline.consumer_release(stage);
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(O); ++c) O(r, c) *= rescale[r];
    }
    to_p();
    stage = next;
  }
  // Every S of this work tile is done: the producer may load the next one's Q.
  cutlass::arch::ClusterBarrier::arrive(&smem.q_free);
  v_pipeline.consumer_wait(stage);
  wgmma_issue<false>(mma_o, tOrP, tOrV(_, _, _, slot(stage)), tOrO);
  warpgroup_wait<0>();
  fence_operands(tOrP, tOrO);
  v_pipeline.consumer_release(stage);
  ++stage;

  // O / l, and lse = m + log l; a row that sees no key at all gets o = 0 and lse = +inf (the
  // backward's exp(s - lse) is then 0: a finite don't-care row, golden/FORMAT.md).
  T* out = static_cast<T*>(p.args.o);
  CUTE_UNROLL
  for (int r = 0; r < R; ++r) {
    const float total = quad_sum(l[r]);
    const float inv = total > 0.f ? 1.f / total : 0.f;
    const int row = q0 + get<0>(cO(r, 0));
    if (row >= s.seq) continue;
    T* out_row = out + ((int64_t(b) * s.seq + row) * s.q_heads + h) * Tiles::D + half * Dh;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(O); c += 2) store_pair(out_row + get<1>(cO(r, c)), O(r, c) * inv, O(r, c + 1) * inv);
    if (half == 0 && get<1>(cO(r, 0)) == 0) {
      p.args.lse[(int64_t(b) * s.q_heads + h) * s.seq + row] = total > 0.f ? m[r] + logf(total) : INFINITY;
    }
  }
}

template <typename Tiles, typename Params>
__global__ void __launch_bounds__(Tiles::kThreads, 1) hopper_forward_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) unsigned char smem_bytes[];
  auto& smem = *reinterpret_cast<typename Tiles::SharedStorage*>(smem_bytes);
  using Pipeline = typename Tiles::Pipeline;
  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  constexpr int kKProducer = 0, kVProducer = 32;  // the first thread of warps 0 and 1

  Pipeline k_pipeline(smem.k_pipeline,
                      pipeline_params<Pipeline>(Tiles::kStageBytes, Tiles::kThreads - kWarpgroupThreads, kKProducer),
                      Shape<_1, _1, _1>{});
  Pipeline v_pipeline(smem.v_pipeline,
                      pipeline_params<Pipeline>(Tiles::kStageBytes, Tiles::kThreads - kWarpgroupThreads, kVProducer),
                      Shape<_1, _1, _1>{});
  if (threadIdx.x == 0) {
    cutlass::arch::ClusterTransactionBarrier::init(&smem.q_loaded, 1);
    cutlass::arch::ClusterBarrier::init(&smem.q_free, Tiles::kThreads - kWarpgroupThreads);
  }
  __syncthreads();

  const AttentionShape& s = p.args.shape;
  auto band = [&](WorkTile w) {
    return band_tiles(s, w.block * Tiles::kBlockM, Tiles::kBlockM, Tiles::kBlockN, /*rows_are_queries=*/true);
  };
  // The tile index of q_loaded's phase `phase` (-1: the queue is empty).
  auto wait_tile = [&](int phase) {
    cutlass::arch::ClusterBarrier::wait(&smem.q_loaded, phase);
    const int t = smem.tile_index[phase];
    return t < p.tile_count ? t : -1;
  };
  typename Pipeline::PipelineState stage;  // the producers' start state differs (empty slots are free)
  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    stage = cutlass::make_producer_start_state<Pipeline>();
    if (threadIdx.x == kKProducer) {
      // The first tile is the CTA's own; the next comes from the counter once the consumers are done
      // with this one's Q (without a counter, every gridDim.x-th tile).
      for (int phase = 0, t = blockIdx.x;; phase ^= 1) {
        smem.tile_index[phase] = t;
        if (t >= p.tile_count) {  // no more work: complete the phase without a load
          cutlass::arch::ClusterBarrier::arrive(&smem.q_loaded);
          break;
        }
        const WorkTile w = work_tile(t, p.query_blocks, s.q_heads);
        produce_q<Tiles>(p, smem, w);
        load_key_tiles<Tiles, typename Tiles::SmemLayoutKV>(p.tma_k, smem.k.data(), k_pipeline, stage, s,
                                                            w.head / (s.q_heads / s.kv_heads), w.batch, band(w));
        cutlass::arch::ClusterBarrier::wait(&smem.q_free, phase);
        t = p.args.tile_counter ? gridDim.x + atomicAdd(p.args.tile_counter, 1) : t + gridDim.x;
      }
    } else if (threadIdx.x == kVProducer) {
      for (int phase = 0, t; (t = wait_tile(phase)) >= 0; phase ^= 1) {
        const WorkTile w = work_tile(t, p.query_blocks, s.q_heads);
        load_key_tiles<Tiles, typename Tiles::SmemLayoutKV>(p.tma_v, smem.v.data(), v_pipeline, stage, s,
                                                            w.head / (s.q_heads / s.kv_heads), w.batch, band(w));
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    for (int phase = 0, t; (t = wait_tile(phase)) >= 0; phase ^= 1) {
      const WorkTile w = work_tile(t, p.query_blocks, s.q_heads);
      consume<Tiles>(p, smem, k_pipeline, v_pipeline, stage, w, band(w));
    }
  }
}

template <typename T, int D>
void launch(const AttentionForwardArgs& a, cudaStream_t stream) {
  using Tiles = ForwardTiles<T, D>;
  const AttentionShape& s = a.shape;
  auto tma_q = make_tma_copy(SM90_TMA_LOAD{}, query_tensor<Tiles>(a.q, s), take<0, 2>(typename Tiles::SmemLayoutQ{}));
  auto kv_tile = take<0, 2>(typename Tiles::SmemLayoutKV{});
  auto tma_k = make_tma_copy(SM90_TMA_LOAD{}, key_tensor<Tiles>(a.k, s), kv_tile);
  auto tma_v = make_tma_copy(SM90_TMA_LOAD{}, key_tensor<Tiles>(a.v, s), kv_tile);
  using Params = ForwardParams<decltype(tma_q), decltype(tma_k)>;
  const int query_blocks = (s.seq + Tiles::kBlockM - 1) / Tiles::kBlockM;
  const int tile_count = query_blocks * s.q_heads * s.batch;  // fits: launch_attention_forward checks
  const Params params{a, tma_q, tma_k, tma_v, query_blocks, tile_count};
  // One CTA per SM (the shared memory allows no second), or fewer when there are fewer tiles.
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const dim3 grid(std::min(tile_count, sms));
  launch_with_shared_storage<Tiles>(hopper_forward_kernel<Tiles, Params>, grid, params, stream);
}

}  // namespace

}  // namespace gemma4::impl::cuda::hopper

namespace gemma4::impl::cuda {

bool attention_head_dim_supported(int head_dim) { return head_dim == 64 || head_dim == 256 || head_dim == 512; }

const char* launch_attention_forward(AttentionDtype dtype, const AttentionForwardArgs& args, cudaStream_t stream) {
  // The work tiles (64 or more query rows each) are counted in an int, with room for the counter's overshoot.
  const AttentionShape& s = args.shape;
  if ((int64_t(s.seq) + 63) / 64 * s.q_heads * s.batch > INT32_MAX / 2)
    return "attention forward: too many query tiles";
  const bool built = dispatch(dtype, args.shape.head_dim, [&](auto type_tag, auto dim_tag) {
    hopper::launch<decltype(type_tag), decltype(dim_tag)::value>(args, stream);
  });
  return cuda_status(built ? nullptr : "attention forward: head dim not built (64, 256, 512)");
}

}  // namespace gemma4::impl::cuda
