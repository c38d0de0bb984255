// Attention backward on Hopper's own instructions (sm_90a) for head dims 64 and 256: one CTA per
// 64 keys of one kv head, looping over the query heads of its group and the query tiles inside
// the band (hopper_backward_tiles.cuh has the shapes and the split between warpgroups):
//   producer  (warpgroup 0, one thread): K and V once, then Q and dO of every tile by TMA;
//   consumers (warpgroups 1 and 2): S^T = K Q^T, dP^T = V dO^T (wgmma), P^T = exp(S^T - lse) with
//             the mask on band-edge tiles only, dS^T = P^T (dP^T - delta); then dV += P^T dO,
//             dK += dS^T Q (kept in registers) and dQ += dS K (added to an fp32 buffer).
// dQ has many writers (every key block of the band): atomics in arrival order by default, or, when
// deterministic, in key-block order: the CTA of key block n waits until the n - first blocks before
// it have added to the same query tile (a semaphore per query tile; CTAs start in block order, so
// the one waited for is running or done). A last kernel rounds the fp32 dQ to the input's dtype.
// Head dim 512 keeps the warp-level backward (attention_backward.cu): its dK and dV (64 x 512 fp32
// each) do not fit two warpgroups' registers. delta = rowsum(dO * O) and lse come from the forward.
#include <cuda/atomic>

#include "impl/cuda/hopper_backward_tiles.cuh"
#include "impl/cuda/hopper_forward_tiles.cuh"

namespace gemma4::impl::cuda::hopper {
namespace {

template <typename TmaQ, typename TmaKV>
struct BackwardParams {
  AttentionBackwardArgs args;
  TmaQ tma_q, tma_dout;
  TmaKV tma_k, tma_v;
  float* dq_accum;     // [B, S, Hq, D] fp32, zeroed
  int* dq_semaphores;  // [B, Hq, query tiles], zeroed; null: atomics in arrival order
};

// Named barriers (beyond CUTLASS's reserved ones) among the two consumer warpgroups.
constexpr uint32_t kPdsWrittenBarrier = 0, kTurnBarrier = 1;
constexpr int kConsumerThreads = 2 * kWarpgroupThreads;

// The grid is (kv heads, key blocks, batch), heads fastest: the CTAs resident together belong to
// many heads, so that in the deterministic mode the key blocks that wait for each other's turn on
// one query tile are few and launched one after another, not a whole wave of one head's blocks
// waiting on its first.
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

// *p += v, four floats as one 16-byte reduction in L2 (sm_90; no value returned, unlike atomicAdd).
__device__ inline void red_add(float* p, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

// dQ's writers take turns per query tile, in key-block order (the deterministic mode).
struct DqTurn {
  int* semaphore;  // null: no turns (atomics in arrival order)
  int mine;        // how many key blocks add to this query tile before this CTA
  __device__ void wait(int thread) const {
    if (semaphore == nullptr) return;
    if (thread == 0) {
      ::cuda::atomic_ref<int, ::cuda::thread_scope_device> turn(*semaphore);
      while (turn.load(::cuda::memory_order_acquire) != mine) __nanosleep(32);
    }
    cutlass::arch::NamedBarrier::sync(kConsumerThreads, kTurnBarrier);
  }
  __device__ void pass(int thread) const {
    if (semaphore == nullptr) return;
    __threadfence();  // this thread's additions before the next writer's
    cutlass::arch::NamedBarrier::sync(kConsumerThreads, kTurnBarrier);
    if (thread == 0)
      ::cuda::atomic_ref<int, ::cuda::thread_scope_device>(*semaphore).store(mine + 1, ::cuda::memory_order_release);
  }
};

template <typename Tiles, typename Params>
__device__ void consume(const Params& p, typename Tiles::SharedStorage& smem, typename Tiles::Pipeline& pipeline) {
  constexpr int M = Tiles::kBlockM, N = Tiles::kBlockN, Dh = Tiles::kDh, D = Tiles::D;
  constexpr int kChunksEach = Tiles::kDqChunks / 2;
  using Element = typename Tiles::Element;
  using T = CudaElement<Element>;
  const AttentionShape& s = p.args.shape;
  const int b = blockIdx.z, k0 = key_block() * N;
  const int consumer = threadIdx.x / kWarpgroupThreads - 1, thread = threadIdx.x % kWarpgroupThreads;
  const int flat = threadIdx.x - kWarpgroupThreads;  // 0..255 over both consumers
  const int32_t* valid = p.args.key_valid ? p.args.key_valid + int64_t(b) * s.seq : nullptr;
  const Steps steps = steps_of<Tiles>(s);

  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Tiles::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Tiles::SmemLayoutKV{});
  Tensor sKt = make_tensor(make_smem_ptr(smem.k.data()), typename Tiles::SmemLayoutKt{});
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Tiles::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename Tiles::SmemLayoutQ{});
  Tensor sQt = make_tensor(make_smem_ptr(smem.q.data()), typename Tiles::SmemLayoutQt{});
  Tensor sdOt = make_tensor(make_smem_ptr(smem.dout.data()), typename Tiles::SmemLayoutQt{});
  Tensor sPt = make_tensor(make_smem_ptr(smem.pt.data()), typename Tiles::SmemLayoutPt{});
  Tensor sdSt = make_tensor(make_smem_ptr(smem.dst.data()), typename Tiles::SmemLayoutPt{});
  Tensor sdS = make_tensor(make_smem_ptr(smem.dst.data()), typename Tiles::SmemLayoutDs{});

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

  // dQ, one chunk of this warpgroup's half of D at a time.
  typename Tiles::MmaDq mma_dq;
  auto thr_dq = mma_dq.get_thread_slice(thread);
  Tensor tQrdS = thr_dq.partition_fragment_A(sdS);  // (.., .., k blocks, buffers)
  Tensor tQrKt = thr_dq.partition_fragment_B(sKt);  // (.., .., k blocks, chunks)
  Tensor tQrdQ = partition_fragment_C(mma_dq, Shape<Int<M>, Int<Tiles::kDqChunk>>{});
  Tensor tQcdQ = thr_dq.partition_C(make_identity_tensor(Shape<Int<M>, Int<Tiles::kDqChunk>>{}));

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

    // dQ's first chunk, then dV and dK, whose products run while the chunk is added.
    const int chunk0 = consumer * kChunksEach;
    wgmma_issue<true>(mma_dq, tQrdS(_, _, _, buffer), tQrKt(_, _, _, chunk0), tQrdQ);
    wgmma_issue<false>(mma_dkv, tKVrPt(_, _, _, buffer), tKVrdOt(_, _, _, qslot + consumer), tdVrdV);
    wgmma_issue<false>(mma_dkv, tKVrdSt(_, _, _, buffer), tKVrQt(_, _, _, qslot + consumer), tdKrdK);
    const DqTurn turn{p.dq_semaphores == nullptr
                          ? nullptr
                          : p.dq_semaphores + (int64_t(b) * s.q_heads + head) * ((s.seq + M - 1) / M) + steps.tile(i),
                      key_block() - band_tiles(s, q0, M, N, /*rows_are_queries=*/true).first};
    float* dq_rows = p.dq_accum + (int64_t(b) * s.seq * s.q_heads + head) * D;
    // Adds a dQ chunk, four adjacent columns (one 16-byte atomic) at a time: a thread holds two
    // adjacent columns of two rows, its quad neighbour (lane ^ 1) the next two, so the pair swaps
    // one row's values and each adds four columns of one row. Half the atomics of pairs: the adds
    // to L2 are what limits this kernel.
    Tensor dQ = make_tensor(tQrdQ.data(), rows_by_columns(tQrdQ.layout()));
    Tensor cdQ = make_tensor(tQcdQ.data(), rows_by_columns(tQcdQ.layout()));
    const bool odd = thread & 1;
    auto add_dq = [&](int chunk) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(dQ); c += 2) {
        const float a0 = dQ(0, c), a1 = dQ(0, c + 1), b0 = dQ(1, c), b1 = dQ(1, c + 1);
        const float got0 = __shfl_xor_sync(0xffffffff, odd ? a0 : b0, 1);
        const float got1 = __shfl_xor_sync(0xffffffff, odd ? a1 : b1, 1);
        const float4 v = odd ? make_float4(got0, got1, b0, b1) : make_float4(a0, a1, got0, got1);
        const int q = q0 + (odd ? get<0>(cdQ(1, c)) : get<0>(cdQ(0, c)));
        if (q >= s.seq) continue;
        const int column = chunk * Tiles::kDqChunk + (get<1>(cdQ(0, c)) & ~3);
        red_add(dq_rows + int64_t(q) * s.q_heads * D + column, v);
      }
    };
    warpgroup_wait<2>();
    warpgroup_fence_operand(tQrdQ);
    turn.wait(flat);
    add_dq(chunk0);
    CUTE_UNROLL
    for (int chunk = chunk0 + 1; chunk < chunk0 + kChunksEach; ++chunk) {
      wgmma_issue<true>(mma_dq, tQrdS(_, _, _, buffer), tQrKt(_, _, _, chunk), tQrdQ);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tQrdQ);
      add_dq(chunk);
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(tdVrdV);
    warpgroup_fence_operand(tdKrdK);
    turn.pass(flat);
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

// dq = dq_accum rounded to T, four values a thread.
template <typename T>
__global__ void round_dq_kernel(const float4* accum, T* dq, int64_t quads) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < quads; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = accum[i];
    store_pair(dq + 4 * i, v.x, v.y);
    store_pair(dq + 4 * i + 2, v.z, v.w);
  }
}

template <typename T, int D>
void launch(const AttentionBackwardArgs& a, cudaStream_t stream) {
  using Tiles = BackwardTiles<T, D>;
  const AttentionShape& s = a.shape;
  auto q_tile = take<0, 2>(typename Tiles::SmemLayoutQ{});
  auto kv_tile = take<0, 2>(typename Tiles::SmemLayoutKV{});
  auto tma_q = make_tma_copy(SM90_TMA_LOAD{}, query_tensor<Tiles>(a.q, s), q_tile);
  auto tma_dout = make_tma_copy(SM90_TMA_LOAD{}, query_tensor<Tiles>(a.dout, s), q_tile);
  auto tma_k = make_tma_copy(SM90_TMA_LOAD{}, key_tensor<Tiles>(a.k, s), kv_tile);
  auto tma_v = make_tma_copy(SM90_TMA_LOAD{}, key_tensor<Tiles>(a.v, s), kv_tile);
  using Params = BackwardParams<decltype(tma_q), decltype(tma_k)>;
  float* dq_accum = static_cast<float*>(a.workspace);
  const int64_t dq_values = int64_t(s.batch) * s.seq * s.q_heads * D;
  int* semaphores = a.deterministic ? reinterpret_cast<int*>(dq_accum + dq_values) : nullptr;
  const Params params{a, tma_q, tma_dout, tma_k, tma_v, dq_accum, semaphores};
  constexpr int bytes = int(sizeof(typename Tiles::SharedStorage));
  static_assert(bytes <= kMaxSharedBytes, "backward tiles exceed shared memory");
  auto kernel = hopper_backward_kernel<Tiles, Params>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  const dim3 grid(s.kv_heads, (s.seq + Tiles::kBlockN - 1) / Tiles::kBlockN, s.batch);
  kernel<<<grid, Tiles::kThreads, bytes, stream>>>(params);
  const int64_t quads = dq_values / 4;
  round_dq_kernel<T><<<int(std::min<int64_t>((quads + 255) / 256, 65535)), 256, 0, stream>>>(
      reinterpret_cast<const float4*>(dq_accum), static_cast<T*>(a.dq), quads);
}

}  // namespace
}  // namespace gemma4::impl::cuda::hopper

namespace gemma4::impl::cuda {

size_t attention_backward_workspace_bytes(const AttentionShape& s, bool deterministic) {
  if (s.head_dim == 512) return 0;  // the warp-level backward writes dQ itself
  const int64_t dq_accum = int64_t(s.batch) * s.seq * s.q_heads * s.head_dim * int64_t(sizeof(float));
  const int64_t query_tiles = (s.seq + 63) / 64;
  return size_t(dq_accum + (deterministic ? int64_t(s.batch) * s.q_heads * query_tiles * int64_t(sizeof(int)) : 0));
}

const char* launch_attention_backward(AttentionDtype dtype, const AttentionBackwardArgs& args, cudaStream_t stream) {
  if (args.shape.head_dim == 512) return launch_attention_backward_warp_mma(dtype, args, stream);
  const bool built = dispatch(dtype, args.shape.head_dim, [&](auto type_tag, auto dim_tag) {
    constexpr int D = decltype(dim_tag)::value;
    if constexpr (D != 512) hopper::launch<decltype(type_tag), D>(args, stream);
  });
  return cuda_status(built ? nullptr : "attention backward: head dim not built (64, 256, 512)");
}

}  // namespace gemma4::impl::cuda
