// The warp-level (mma.sync) attention backward, kept for head dim 512 (the Hopper backward,
// hopper_attention_backward.cu, takes 64 and 256). Two kernels, so that every gradient element is
// written by exactly one warp (no atomics: bitwise deterministic):
//   dkdv: one CTA per block of keys and kv head; loops over the query heads of its group and the
//         query tiles inside the band: S^T = K Q^T, P^T = exp(S^T - lse), dP^T = V dO^T,
//         dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q.
//   dq:   one CTA per block of queries and query head; loops over the key tiles inside the band:
//         S = Q K^T, dP = dO V^T, dS = P (dP - delta), dQ += dS K.
// delta = rowsum(dO * O) and lse come from the forward (attention_kernels.h). Scale is 1.
#include "impl/cuda/attention_common.cuh"

namespace gemma4::impl::cuda {
namespace {

using namespace tile;

// RG row groups of 16 rows, NS warps per row group (each contracts D/NS columns of the scores and
// owns D/NS columns of the gradients, keeping them at <= 128 fp32 registers per thread), BC
// columns per streamed tile. Rows are queries (dq) or keys (dkdv).
template <int D, bool KEY_ROWS>
struct BackwardConfig {
  static constexpr int RG = KEY_ROWS ? (D == 512 ? 2 : 4) : (D == 256 ? 8 : 4);
  static constexpr int NS = KEY_ROWS ? (D == 64 ? 1 : D / 128) : (D == 512 ? 2 : 1);
  static constexpr int BC = D == 64 ? 64 : 32;
  static constexpr int THREADS = RG * NS * 32, BR = RG * 16, DS = D / NS, NT = BC / 8;
  template <typename T>
  static constexpr int bytes(int stages) {  // two resident row tiles, two streamed column tiles
    return 2 * tile_bytes<T, D>(BR) + 2 * stages * tile_bytes<T, D>(BC) + (NS > 1 ? RG * NS * NT * 128 * 4 : 0);
  }
  template <typename T>
  static constexpr int stages() {
    return bytes<T>(2) <= kMaxSharedBytes ? 2 : 1;
  }
};

// The shared-memory layout and tile pipeline common to both kernels: two resident tiles of BR rows
// (a, b) and STAGES pairs of streamed tiles of BC rows (c, d).
template <typename T, typename C, int D, int STAGES>
struct Tiles {
  static constexpr int PITCH = D + kPad;
  T *a, *b, *c, *d;
  float* scratch;
  __device__ explicit Tiles(unsigned char* smem) {
    a = reinterpret_cast<T*>(smem);
    b = a + C::BR * PITCH;
    c = b + C::BR * PITCH;
    d = c + STAGES * C::BC * PITCH;
    scratch = reinterpret_cast<float*>(d + STAGES * C::BC * PITCH);
  }

  // The two score blocks of this warp's 16 rows against the streamed tiles of `stage`:
  // s = a . c^T and dp = b . d^T (S and dP, or S^T and dP^T), summed over the D splits.
  __device__ void scores(float (&s)[C::NT][4], float (&dp)[C::NT][4], int stage, int rg, int split, int lane) const {
    constexpr int NT = C::NT, DS = C::DS;
    const int row = rg * 16 * PITCH + split * DS, column = stage * C::BC * PITCH + split * DS;
    float* rows_scratch = scratch + rg * C::NS * NT * 128;
    warp_scores<NT, DS, PITCH>(s, a + row, c + column, lane);
    reduce_splits<NT, C::NS>(s, rows_scratch, split, lane, 1 + rg);
    warp_scores<NT, DS, PITCH>(dp, b + row, d + column, lane);
    reduce_splits<NT, C::NS>(dp, rows_scratch, split, lane, 1 + rg);
  }
};

template <typename T, int D, int STAGES>
__global__ void __launch_bounds__(BackwardConfig<D, false>::THREADS, 1) attention_dq_kernel(AttentionBackwardArgs a) {
  using C = BackwardConfig<D, false>;
  constexpr int PITCH = D + kPad, DS = C::DS, NT = C::NT, BC = C::BC, BR = C::BR;
  extern __shared__ __align__(16) unsigned char smem[];
  const Tiles<T, C, D, STAGES> sm(smem);  // a: Q rows, b: dO rows, c: K tiles, d: V tiles

  const AttentionShape& s = a.shape;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rg = warp % C::RG, split = warp / C::RG;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BR, hk = h / (s.q_heads / s.kv_heads);
  const int64_t q_stride = int64_t(s.q_heads) * D, q_offset = (int64_t(b) * s.seq * s.q_heads + h) * D;
  const int64_t kv_offset = (int64_t(b) * s.kv_heads + hk) * s.seq * D;
  const T* k = static_cast<const T*>(a.k) + kv_offset;
  const T* v = static_cast<const T*>(a.v) + kv_offset;
  const int32_t* valid = a.key_valid ? a.key_valid + int64_t(b) * s.seq : nullptr;

  const TileRange tiles = band_tiles(s, q0, BR, BC, /*rows_are_queries=*/true);
  const int steps = tiles.last - tiles.first + 1;
  auto load_kv = [&](int i, int stage) {  // step i: key tile tiles.first + i
    const int k0 = (tiles.first + i) * BC;
    load_tile<BC, D, C::THREADS>(sm.c + stage * BC * PITCH, k + int64_t(k0) * D, D, s.seq - k0);
    load_tile<BC, D, C::THREADS>(sm.d + stage * BC * PITCH, v + int64_t(k0) * D, D, s.seq - k0);
  };
  load_tile<BR, D, C::THREADS>(sm.a, static_cast<const T*>(a.q) + q_offset + q0 * q_stride, q_stride, s.seq - q0);
  load_tile<BR, D, C::THREADS>(sm.b, static_cast<const T*>(a.dout) + q_offset + q0 * q_stride, q_stride, s.seq - q0);
  load_kv(0, 0);
  cp_async_commit();

  const int row0 = q0 + rg * 16 + lane / 4;
  const int rows[2] = {row0, row0 + 8};
  float lse[2], delta[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t at = (int64_t(b) * s.q_heads + h) * s.seq + rows[r];
    lse[r] = rows[r] < s.seq ? a.lse[at] * kLog2e : INFINITY;
    delta[r] = rows[r] < s.seq ? a.delta[at] : 0.f;
  }
  float dq[DS / 8][4] = {};

  for (int i = 0; i < steps; ++i) {
    const int stage = begin_step<STAGES>(i, steps, load_kv);
    float p[NT][4], dp[NT][4];
    sm.scores(p, dp, stage, rg, split, lane);

    const int k0 = (tiles.first + i) * BC;
    const bool unmasked = tile_unmasked(s, valid, q0, BR, k0, BC, true);
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const bool in = unmasked || allowed(s, valid, rows[r], k0 + n * 8 + 2 * (lane % 4) + (e & 1));
        const float prob = in ? exp2f(p[n][e] * kLog2e - lse[r]) : 0.f;
        p[n][e] = prob * (dp[n][e] - delta[r]);  // dS
      }
    warp_accumulate<NT, DS, PITCH>(dq, p, sm.c + stage * BC * PITCH + split * DS, lane);
    end_step<STAGES>(i, steps, load_kv);
  }
  const float one[2] = {1.f, 1.f};
  T* out = static_cast<T*>(a.dq) + q_offset + split * DS;
  store_rows<DS>(out + int64_t(q0 + rg * 16) * q_stride, q_stride, 0, s.seq - (q0 + rg * 16), dq, one, lane);
}

template <typename T, int D, int STAGES>
__global__ void __launch_bounds__(BackwardConfig<D, true>::THREADS, 1) attention_dkdv_kernel(AttentionBackwardArgs a) {
  using C = BackwardConfig<D, true>;
  constexpr int PITCH = D + kPad, DS = C::DS, NT = C::NT, BC = C::BC, BR = C::BR;
  extern __shared__ __align__(16) unsigned char smem[];
  const Tiles<T, C, D, STAGES> sm(smem);  // a: K rows, b: V rows, c: Q tiles, d: dO tiles

  const AttentionShape& s = a.shape;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rg = warp % C::RG, split = warp / C::RG;
  const int b = blockIdx.z, hk = blockIdx.y, k0 = blockIdx.x * BR, group = s.q_heads / s.kv_heads;
  const int64_t q_stride = int64_t(s.q_heads) * D, kv_offset = (int64_t(b) * s.kv_heads + hk) * s.seq * D;
  const int32_t* valid = a.key_valid ? a.key_valid + int64_t(b) * s.seq : nullptr;

  const TileRange tiles = band_tiles(s, k0, BR, BC, /*rows_are_queries=*/false);
  const int per_head = tiles.last - tiles.first + 1, steps = group * per_head;
  // Step i: query head hk * group + i / per_head, query tile tiles.first + i % per_head.
  auto head_of = [&](int i) { return hk * group + i / per_head; };
  auto tile_of = [&](int i) { return tiles.first + i % per_head; };
  auto load_q = [&](int i, int stage) {
    const int64_t offset = (int64_t(b) * s.seq * s.q_heads + head_of(i)) * D + int64_t(tile_of(i)) * BC * q_stride;
    const int rows = s.seq - tile_of(i) * BC;
    load_tile<BC, D, C::THREADS>(sm.c + stage * BC * PITCH, static_cast<const T*>(a.q) + offset, q_stride, rows);
    load_tile<BC, D, C::THREADS>(sm.d + stage * BC * PITCH, static_cast<const T*>(a.dout) + offset, q_stride, rows);
  };
  load_tile<BR, D, C::THREADS>(sm.a, static_cast<const T*>(a.k) + kv_offset + int64_t(k0) * D, D, s.seq - k0);
  load_tile<BR, D, C::THREADS>(sm.b, static_cast<const T*>(a.v) + kv_offset + int64_t(k0) * D, D, s.seq - k0);
  load_q(0, 0);
  cp_async_commit();

  const int row0 = k0 + rg * 16 + lane / 4;
  const int keys[2] = {row0, row0 + 8};
  float dk[DS / 8][4] = {}, dv[DS / 8][4] = {};

  for (int i = 0; i < steps; ++i) {
    const int stage = begin_step<STAGES>(i, steps, load_q);
    float p[NT][4], dp[NT][4];
    sm.scores(p, dp, stage, rg, split, lane);

    const int c0 = tile_of(i) * BC;
    const int64_t stats = (int64_t(b) * s.q_heads + head_of(i)) * s.seq;
    const bool unmasked = tile_unmasked(s, valid, k0, BR, c0, BC, false);
    float ds[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int query = c0 + n * 8 + 2 * (lane % 4) + (e & 1);
        const bool in = query < s.seq && (unmasked || allowed(s, valid, query, keys[e / 2]));
        const float prob = in ? exp2f(p[n][e] * kLog2e - a.lse[stats + query] * kLog2e) : 0.f;
        ds[n][e] = in ? prob * (dp[n][e] - a.delta[stats + query]) : 0.f;
        p[n][e] = prob;
      }
    warp_accumulate<NT, DS, PITCH>(dv, p, sm.d + stage * BC * PITCH + split * DS, lane);
    warp_accumulate<NT, DS, PITCH>(dk, ds, sm.c + stage * BC * PITCH + split * DS, lane);
    end_step<STAGES>(i, steps, load_q);
  }
  const float one[2] = {1.f, 1.f};
  const int64_t row_offset = kv_offset + int64_t(k0 + rg * 16) * D + split * DS;
  store_rows<DS>(static_cast<T*>(a.dk) + row_offset, D, 0, s.seq - (k0 + rg * 16), dk, one, lane);
  store_rows<DS>(static_cast<T*>(a.dv) + row_offset, D, 0, s.seq - (k0 + rg * 16), dv, one, lane);
}

template <typename Kernel>
void launch(Kernel kernel, int bytes, dim3 grid, int threads, const AttentionBackwardArgs& args, cudaStream_t stream) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  kernel<<<grid, threads, bytes, stream>>>(args);
}

}  // namespace

const char* launch_attention_backward_warp_mma(AttentionDtype dtype, const AttentionBackwardArgs& args,
                                               cudaStream_t stream) {
  const AttentionShape& s = args.shape;
  const bool built = dispatch(dtype, s.head_dim, [&](auto type_tag, auto dim_tag) {
    using T = decltype(type_tag);
    constexpr int D = decltype(dim_tag)::value;
    if constexpr (D == 512) {
      using KV = BackwardConfig<D, true>;
      constexpr int kv_stages = KV::template stages<T>(), kv_bytes = KV::template bytes<T>(kv_stages);
      static_assert(kv_bytes <= kMaxSharedBytes, "dkdv tiles exceed shared memory");
      launch(attention_dkdv_kernel<T, D, kv_stages>, kv_bytes, dim3((s.seq + KV::BR - 1) / KV::BR, s.kv_heads, s.batch),
             KV::THREADS, args, stream);
      using Q = BackwardConfig<D, false>;
      constexpr int q_stages = Q::template stages<T>(), q_bytes = Q::template bytes<T>(q_stages);
      static_assert(q_bytes <= kMaxSharedBytes, "dq tiles exceed shared memory");
      launch(attention_dq_kernel<T, D, q_stages>, q_bytes, dim3((s.seq + Q::BR - 1) / Q::BR, s.q_heads, s.batch),
             Q::THREADS, args, stream);
    }
  });
  return cuda_status(built && s.head_dim == 512 ? nullptr
                                                : "warp-level attention backward: built for head dim 512 only");
}

}  // namespace gemma4::impl::cuda
