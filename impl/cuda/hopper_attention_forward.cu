// Attention forward on Hopper's own instructions (sm_90a): TMA loads, wgmma, a producer warpgroup
// and two consumer warpgroups (FlashAttention-3's organisation, written for this project's layouts
// and band mask; scale 1, GEMMA4.md). One CTA per 128 query rows of one head:
//   producer  (warpgroup 0, one thread): Q once, then the K and V tiles that intersect the band,
//             through a two-stage pipeline per tensor (full/empty mbarriers);
//   consumers (warpgroups 1 and 2, 64 query rows each): S = Q K^T (wgmma, both operands in shared
//             memory), mask on band-edge tiles only, online softmax in fp32, O += P V (wgmma with P
//             from registers), then O / l and the log-sum-exp straight from registers.
#include "impl/cuda/hopper_attention.h"
#include "impl/cuda/hopper_tiles.cuh"

namespace gemma4::impl::cuda::hopper {
namespace {

// Tile shapes, from the shared-memory budget (227 KiB) and the consumers' registers (240 each):
// D = 256: Q 128 x 256 (64 KiB) + 2 stages of K and of V at 64 x 256 (4 x 32 KiB) = 192 KiB; each
//   consumer thread holds O 64 x 256 / 128 = 128 fp32 and S 64 x 64 / 128 = 32 fp32.
// D = 64: the same rows and keys, 48 KiB (the suite's small test models run here).
// Every tile row is 128-byte swizzled (K-major), which both TMA and wgmma read without bank conflicts.
template <typename T, int kD>
struct ForwardTiles {
  using Element = typename CuteElement<T>::type;
  static constexpr int D = kD, kBlockM = 128, kBlockN = 64, kStages = 2;
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  using Atom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockM>, Int<D>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<D>, Int<kStages>>{}));
  // V read as the B operand of P V: (D, keys), i.e. the same bytes with D as the contiguous
  // (MN-major) mode, which wgmma accepts for 16-bit types.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_ordered_layout(Shape<Int<D>, Int<kBlockN>, Int<kStages>>{}, Step<_2, _1, _3>{})));
  using ConsumerLayout = Layout<Shape<_2, _1, _1>>;  // the two consumer warpgroups split the rows
  using MmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBlockM>, Int<kBlockN>, Int<D>>>(), ConsumerLayout{}));
  using MmaO =
      decltype(make_tiled_mma(GMMA::rs_op_selector<Element, Element, float, Shape<Int<kBlockM>, Int<D>, Int<kBlockN>>,
                                                   GMMA::Major::K, GMMA::Major::MN>(),
                              ConsumerLayout{}));
  using Pipeline = cutlass::PipelineTmaAsync<kStages>;

  struct SharedStorage {
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> k;
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> v;
    typename Pipeline::SharedStorage k_pipeline, v_pipeline;
    uint64_t q_loaded;  // an mbarrier: the Q tile has landed
  };
  static constexpr int kTileBytes = kBlockN * D * int(sizeof(Element));
};

// Global tensors as TMA sees them: (S, D, heads, B), D contiguous.
template <typename Element, int D>
auto query_tensor(const void* p, const AttentionShape& s) {
  return make_tensor(
      make_gmem_ptr(static_cast<const Element*>(p)),
      make_layout(make_shape(s.seq, Int<D>{}, s.q_heads, s.batch),
                  make_stride(int64_t(s.q_heads) * D, _1{}, int64_t(D), int64_t(s.seq) * s.q_heads * D)));
}
template <typename Element, int D>
auto key_tensor(const void* p, const AttentionShape& s) {
  return make_tensor(make_gmem_ptr(static_cast<const Element*>(p)),
                     make_layout(make_shape(s.seq, Int<D>{}, s.kv_heads, s.batch),
                                 make_stride(int64_t(D), _1{}, int64_t(s.seq) * D, int64_t(s.kv_heads) * s.seq * D)));
}

template <typename Tiles, typename TmaQ, typename TmaKV>
struct ForwardParams {
  AttentionForwardArgs args;
  TmaQ tma_q;
  TmaKV tma_k, tma_v;
};

template <typename Tiles, typename Params>
__device__ void produce(const Params& p, typename Tiles::SharedStorage& smem, typename Tiles::Pipeline& k_pipeline,
                        typename Tiles::Pipeline& v_pipeline, TileRange tiles) {
  constexpr int M = Tiles::kBlockM, N = Tiles::kBlockN, D = Tiles::D;
  using Element = typename Tiles::Element;
  const AttentionShape& s = p.args.shape;
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (s.q_heads / s.kv_heads);
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Tiles::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Tiles::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Tiles::SmemLayoutKV{});
  Tensor mQ = p.tma_q.get_tma_tensor(make_shape(s.seq, Int<D>{}, s.q_heads, s.batch));
  Tensor mK = p.tma_k.get_tma_tensor(make_shape(s.seq, Int<D>{}, s.kv_heads, s.batch));
  Tensor mV = p.tma_v.get_tma_tensor(make_shape(s.seq, Int<D>{}, s.kv_heads, s.batch));
  Tensor gQ = local_tile(mQ(_, _, h, b), Shape<Int<M>, Int<D>>{}, make_coord(blockIdx.x, _0{}));
  Tensor gK = local_tile(mK(_, _, hk, b), Shape<Int<N>, Int<D>>{}, make_coord(_, _0{}));  // (N, D, tiles)
  Tensor gV = local_tile(mV(_, _, hk, b), Shape<Int<N>, Int<D>>{}, make_coord(_, _0{}));
  auto [tQg, tQs] = tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
  auto [tKg, tKs] = tma_partition(p.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto [tVg, tVs] = tma_partition(p.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));

  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&smem.q_loaded, M * D * int(sizeof(Element)));
  copy(p.tma_q.with(smem.q_loaded), tQg, tQs);
  auto stage = cutlass::make_producer_start_state<typename Tiles::Pipeline>();
  for (int n = tiles.first; n <= tiles.last; ++n, ++stage) {
    k_pipeline.producer_acquire(stage);
    copy(p.tma_k.with(*k_pipeline.producer_get_barrier(stage)), tKg(_, n), tKs(_, stage.index()));
    v_pipeline.producer_acquire(stage);
    copy(p.tma_v.with(*v_pipeline.producer_get_barrier(stage)), tVg(_, n), tVs(_, stage.index()));
  }
}

template <typename Tiles, typename Params>
__device__ void consume(const Params& p, typename Tiles::SharedStorage& smem, typename Tiles::Pipeline& k_pipeline,
                        typename Tiles::Pipeline& v_pipeline, TileRange tiles) {
  constexpr int M = Tiles::kBlockM, N = Tiles::kBlockN, D = Tiles::D;
  using Element = typename Tiles::Element;
  using T = std::conditional_t<std::is_same_v<Element, cutlass::bfloat16_t>, __nv_bfloat16, __half>;
  const AttentionShape& s = p.args.shape;
  const int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * M;
  const int32_t* valid = p.args.key_valid ? p.args.key_valid + int64_t(b) * s.seq : nullptr;
  const int thread = threadIdx.x - kWarpgroupThreads;

  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Tiles::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Tiles::SmemLayoutKV{});
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename Tiles::SmemLayoutVt{});
  typename Tiles::MmaS mma_s;
  typename Tiles::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(thread);
  auto thr_o = mma_o.get_thread_slice(thread);
  Tensor tSrQ = thr_s.partition_fragment_A(sQ);   // wgmma descriptors of shared memory
  Tensor tSrK = thr_s.partition_fragment_B(sK);   // (.., .., k blocks, stages)
  Tensor tOrV = thr_o.partition_fragment_B(sVt);  // (.., .., k blocks, stages)
  Tensor tSrS = partition_fragment_C(mma_s, Shape<Int<M>, Int<N>>{});
  Tensor tOrO = partition_fragment_C(mma_o, Shape<Int<M>, Int<D>>{});
  clear(tOrO);
  // (row, column) of every accumulator element, and the accumulators as (rows, columns).
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<Int<M>, Int<D>>{}));
  Tensor S = make_tensor(tSrS.data(), rows_by_columns(tSrS.layout()));
  Tensor O = make_tensor(tOrO.data(), rows_by_columns(tOrO.layout()));
  Tensor cO = make_tensor(tOcO.data(), rows_by_columns(tOcO.layout()));
  constexpr int R = size<0>(S);
  float m[R], l[R];
  CUTE_UNROLL
  for (int r = 0; r < R; ++r) m[r] = -INFINITY, l[r] = 0.f;

  cutlass::arch::ClusterBarrier::wait(&smem.q_loaded, 0);
  typename Tiles::Pipeline::PipelineState stage;
  for (int n = tiles.first; n <= tiles.last; ++n, ++stage) {
    k_pipeline.consumer_wait(stage);
    wgmma<true>(mma_s, tSrQ, tSrK(_, _, _, stage.index()), tSrS);
    k_pipeline.consumer_release(stage);

    const int k0 = n * N;
    if (!tile_unmasked(s, valid, q0, M, k0, N, /*rows_are_queries=*/true)) {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i)
        if (!allowed(s, valid, q0 + get<0>(tScS(i)), k0 + get<1>(tScS(i)))) tSrS(i) = -INFINITY;
    }
    // Online softmax: rescale what was accumulated to the new row maximum. A row with no allowed
    // key so far keeps m = -inf and uses 0 as its reference, so exp gives 0 and never NaN.
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) {
      float mx = -INFINITY;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) mx = fmaxf(mx, S(r, c));
      const float m_new = fmaxf(m[r], quad_max(mx));
      const float ref = m_new == -INFINITY ? 0.f : m_new * tile::kLog2e;
      const float rescale = exp2f(m[r] * tile::kLog2e - ref);
      m[r] = m_new;
      float sum = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) {
        S(r, c) = exp2f(S(r, c) * tile::kLog2e - ref);
        sum += S(r, c);
      }
      l[r] = l[r] * rescale + sum;  // this thread's part of the row; the quad is summed at the end
      CUTE_UNROLL
      for (int c = 0; c < size<1>(O); ++c) O(r, c) *= rescale;
    }
    Tensor rP = make_tensor_like<Element>(tSrS);
    CUTE_UNROLL
    for (int i = 0; i < size(tSrS); ++i) rP(i) = Element(tSrS(i));
    Tensor tOrP = make_tensor(rP.data(), as_a_operand(rP.layout()));

    v_pipeline.consumer_wait(stage);
    wgmma<false>(mma_o, tOrP, tOrV(_, _, _, stage.index()), tOrO);
    v_pipeline.consumer_release(stage);
  }

  // O / l, and lse = m + log l; a row that sees no key at all gets o = 0 and lse = +inf (the
  // backward's exp(s - lse) is then 0: a finite don't-care row, golden/FORMAT.md).
  T* out = static_cast<T*>(p.args.o);
  CUTE_UNROLL
  for (int r = 0; r < R; ++r) {
    const float total = quad_sum(l[r]);
    const float inv = total > 0.f ? 1.f / total : 0.f;
    const int row = q0 + get<0>(cO(r, 0));
    if (row >= s.seq) continue;
    T* out_row = out + ((int64_t(b) * s.seq + row) * s.q_heads + h) * D;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(O); c += 2) store_pair(out_row + get<1>(cO(r, c)), O(r, c) * inv, O(r, c + 1) * inv);
    if (get<1>(cO(r, 0)) == 0) {
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

  typename Pipeline::Params pipeline_params;
  pipeline_params.transaction_bytes = Tiles::kTileBytes;
  pipeline_params.role = warpgroup == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pipeline_params.is_leader = threadIdx.x == 0;
  pipeline_params.num_consumers = Tiles::kThreads - kWarpgroupThreads;
  if (threadIdx.x == 0) cutlass::arch::ClusterTransactionBarrier::init(&smem.q_loaded, 1);
  Pipeline k_pipeline(smem.k_pipeline, pipeline_params, Shape<_1, _1, _1>{});
  Pipeline v_pipeline(smem.v_pipeline, pipeline_params, Shape<_1, _1, _1>{});
  __syncthreads();

  const TileRange tiles = band_tiles(p.args.shape, blockIdx.x * Tiles::kBlockM, Tiles::kBlockM, Tiles::kBlockN,
                                     /*rows_are_queries=*/true);
  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    if (threadIdx.x == 0) produce<Tiles>(p, smem, k_pipeline, v_pipeline, tiles);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    consume<Tiles>(p, smem, k_pipeline, v_pipeline, tiles);
  }
}

template <typename T, int D>
void launch(const AttentionForwardArgs& a, cudaStream_t stream) {
  using Tiles = ForwardTiles<T, D>;
  using Element = typename Tiles::Element;
  const AttentionShape& s = a.shape;
  auto tma_q = make_tma_copy(SM90_TMA_LOAD{}, query_tensor<Element, D>(a.q, s), typename Tiles::SmemLayoutQ{});
  auto kv_tile = take<0, 2>(typename Tiles::SmemLayoutKV{});
  auto tma_k = make_tma_copy(SM90_TMA_LOAD{}, key_tensor<Element, D>(a.k, s), kv_tile);
  auto tma_v = make_tma_copy(SM90_TMA_LOAD{}, key_tensor<Element, D>(a.v, s), kv_tile);
  using Params = ForwardParams<Tiles, decltype(tma_q), decltype(tma_k)>;
  const Params params{a, tma_q, tma_k, tma_v};
  constexpr int bytes = int(sizeof(typename Tiles::SharedStorage));
  static_assert(bytes <= kMaxSharedBytes, "forward tiles exceed shared memory");
  auto kernel = hopper_forward_kernel<Tiles, Params>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  const dim3 grid((s.seq + Tiles::kBlockM - 1) / Tiles::kBlockM, s.q_heads, s.batch);
  kernel<<<grid, Tiles::kThreads, bytes, stream>>>(params);
}

}  // namespace

bool forward_supported(int head_dim) { return head_dim == 64 || head_dim == 256; }

void launch_forward(AttentionDtype dtype, const AttentionForwardArgs& args, cudaStream_t stream) {
  dispatch(dtype, args.shape.head_dim, [&](auto type_tag, auto dim_tag) {
    using T = decltype(type_tag);
    constexpr int D = decltype(dim_tag)::value;
    if constexpr (D == 64 || D == 256) launch<T, D>(args, stream);
  });
}

}  // namespace gemma4::impl::cuda::hopper
