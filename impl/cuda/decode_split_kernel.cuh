#pragma once
// Decode attention: the step's few queries against a long K/V cache (flash-decoding). The cache of
// one (batch, kv head) is split into chunks of key tiles, one CTA each; a CTA serves every query
// head of the kv head's GQA group and every query of the step, so each cached byte is read once.
// It writes its partial (max, sum, output) in fp32, and a second small kernel combines the splits
// (with one split the CTA normalises and writes the output itself).
//
// Why mma.sync rather than FMA: per key the kernel reads K and V, 4D bytes in bf16, and does 4D
// FLOP per row (q k and p v), rows = query heads per kv head x queries (2 to 32). Eight rows make
// 8 FLOP a byte; fp32 FMA on an H200 (about 67 TFLOP/s against 4.8 TB/s) runs out at about 14
// FLOP a byte before its conversions and cross-lane reductions, and at 4 queries (32 rows) it
// would be compute-bound. mma.sync's bf16 rate is ten times that, so even with rows padded to the
// instruction's 16 (8x wasted on a 2-row sliding layer) the kernel stays bound by the cache read.
//
// Tiles. A warp owns 16 keys (the mma's k16 for P V, two n8 tiles for Q K^T) and a slice of
// DS <= 128 of the head dim: its output accumulator (16 rows x DS in fp32, DS/2 registers a lane)
// stays at 64 registers and its Q fragments (DS/4) at 32, so head dim 512 splits into four slices
// whose partial scores are summed in shared memory in fixed order (tile::reduce_splits, bitwise
// reproducible). NK key groups of 16 keys run side by side so that one pipeline stage (K and V of
// 16 NK keys) is about 33 KB at every head dim. Three stages and the scratch come to about 105 KB,
// two CTAs an SM, so up to four stages (133 KB) are in flight per SM, well above what the SM's
// share of bandwidth needs over the memory latency (4.8 TB/s / 132 SMs x ~1 us, about 36 KB); the
// second CTA hides the first's per-tile chain. Small steps, whose CTAs have few tiles each, take
// four stages and one CTA an SM instead (plan_decode_attention: when, and the measurements).
// The 3-stage kernel can also have the TMA unit prefetch the tile after its stages into L2, on GPUs
// where that helps (plan_decode_attention); a hint: nothing reads what it fetches but the cp.async
// of that tile, so it cannot change a result.
// Each key group keeps its own online-softmax state; the groups are merged once, at the end.
// Key tiles are counted from the oldest key the first query may see, so tiles outside the sliding
// window are never read; the mask (window, causal order, padding) applies inside the rest.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>

#include "impl/cuda/attention_common.cuh"
#include "impl/cuda/attention_tile.cuh"
#include "impl/cuda/decode_attention_kernels.h"

namespace gemma4::impl::cuda::decode {

using namespace tile;

template <int D, int MT, int S>
struct DecodeConfig {  // S: pipeline stages
  static constexpr int NS = D >= 256 ? D / 128 : 1;  // warps splitting the head dim
  static constexpr int DS = D / NS;
  static constexpr int NK = D >= 512 ? 1 : 512 / D;  // key groups of 16 keys
  static constexpr int WARPS = NK * NS * MT;         // MT: 16-row tiles of queries
  static constexpr int THREADS = 32 * WARPS;
  static constexpr int TK = 16 * NK;  // keys per stage
  static constexpr int PITCH = D + kPad;
  static constexpr int ROWS = 16 * MT;
  static constexpr int STAGES = S;
  static constexpr int SCRATCH = NS == 1 ? 0 : 256 * NS * NK * MT;  // floats: reduce_splits per row group
  static constexpr int STATS = (2 * NK + 2) * ROWS;                 // floats: per group and merged (max, sum)
  static constexpr int PADS = STAGES * TK;                          // int64: each stage's keys' padding
  static constexpr int STAGE_ELEMS = 2 * TK * PITCH;                // K then V
  template <typename T>
  static constexpr int pads_offset() {  // bytes; 16-aligned for the padding's 16-byte loads
    return STAGES * STAGE_ELEMS * int(sizeof(T)) + (SCRATCH + STATS) * 4;
  }
  template <typename T>
  static constexpr int bytes() {
    return pads_offset<T>() + PADS * 8;
  }
  static_assert(DS % 16 == 0 && (DS / 8) % 2 == 0, "a slice is whole k16 steps and pairs of n8 tiles");
  static_assert((TK * D / 8) % THREADS == 0, "every thread issues the same number of 16-byte copies");
  static_assert(NK * ROWS * D * 4 <= STAGES * 2 * TK * PITCH * 2, "the merge buffer fits in the stages");
};

// Where the splits put their partial results (fp32): o [B*Hkv, splits, rows, D], m and l
// [B*Hkv, splits, rows]; m in log2 units (scores x log2 e).
struct SplitArgs {
  float* o = nullptr;
  float* m = nullptr;
  float* l = nullptr;
  int splits = 1, tiles_per_split = 0;
  int prefetch = 0;  // key tiles fetched into L2 ahead of the tile a stage is loading (0: none)
};

// A bulk prefetch into L2 by the TMA unit (16-aligned, a multiple of 16 bytes): it holds no load
// slot of the SM, whose own outstanding requests bound what one CTA has in flight.
using PrefetchL2 = cute::SM90_BULK_COPY_G2S::PREFETCH;

// 8 bytes, through L1 (cp.async.cg takes 16 only); invalid: zero-filled, nothing read.
__device__ inline void cp_async8(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 8 : 0));
}

template <typename T>
__device__ inline void store4(T* p, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(p) = make_uint2(pack2<T>(a, b), pack2<T>(c, d));
}

template <typename T, int D, int MT, int S>
__global__ void __launch_bounds__(DecodeConfig<D, MT, S>::THREADS)
    decode_attention_kernel(const DecodeAttentionArgs a, const SplitArgs sp) {
  using C = DecodeConfig<D, MT, S>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* stages = reinterpret_cast<T*>(smem);
  float* scratch = reinterpret_cast<float*>(smem + C::STAGES * C::STAGE_ELEMS * sizeof(T));
  float* stat_m = scratch + C::SCRATCH;  // [NK][ROWS] per key group
  float* stat_l = stat_m + C::NK * C::ROWS;
  float* row_m = stat_l + C::NK * C::ROWS;  // [ROWS] merged
  float* row_l = row_m + C::ROWS;
  static_assert(C::template pads_offset<T>() % 16 == 0, "the padding stages are read 16 bytes at a time");
  int64_t* pads = reinterpret_cast<int64_t*>(smem + C::template pads_offset<T>());  // [STAGES][TK]

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int mt = warp % MT, ds = (warp / MT) % C::NS, kg = warp / (MT * C::NS);
  const int group = kg * MT + mt;  // the warps that share 16 rows and 16 keys, one per slice
  const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int G = a.q_heads / a.kv_heads, R = G * a.queries;
  const int64_t last = a.start + a.queries - 1;  // no query sees a key past the last query
  const int tiles = int((last - a.first_key + C::TK) / C::TK);
  const int t0 = split * sp.tiles_per_split;
  const int n = max(0, min(tiles, t0 + sp.tiles_per_split) - t0);

  const int64_t* pad = a.padding != nullptr ? a.padding + int64_t(b) * a.padding_stride : nullptr;
  const int window = int(a.window);
  // Stage s holds K then V of TK consecutive key indices; token j is cache row j % rows. Keys past
  // the last query are zero-filled (never garbage: their probability is 0, and 0 x NaN is not).
  const int64_t kv_offset = (int64_t(b) * a.kv_heads + kvh) * a.rows * D;
  const T* kc = static_cast<const T*>(a.k) + kv_offset;
  const T* vc = static_cast<const T*>(a.v) + kv_offset;
  // Tiles are loaded in order; the next one's first key index and cache row advance by TK (no
  // 64-bit modulo per tile). A tile that ends before the last query and does not wrap is copied
  // without tests; another takes one bound and one wrap test per 16-byte chunk (a ring's valid rows
  // wrap at most once: the keys a step sees fit the ring).
  int64_t next_key = a.first_key + int64_t(t0) * C::TK, next_row = next_key % a.rows;
  auto advance = [&](int64_t& key, int64_t& row) {  // to the next tile: key index and cache row
    key += C::TK;
    row += C::TK;
    while (row >= a.rows) row -= a.rows;
  };
  // A thread copies the same column of rows r0, r0 + kRowStep, ...: its offsets into the stage and
  // the cache differ by constants from one copy to the next.
  constexpr int kChunks = D / 8, kRowStep = C::THREADS / kChunks;
  static_assert(C::THREADS % kChunks == 0, "a thread keeps one column of the tile");
  const int r0 = threadIdx.x / kChunks, col0 = (threadIdx.x % kChunks) * 8;
  auto load = [&](int stage) {
    const int valid_rows = int(min(last - next_key + 1, int64_t(C::TK)));
    const int wrap = int(min(a.rows - next_row, int64_t(C::TK)));  // rows from here on wrap to row 0
    const T* kt = kc + next_row * D + r0 * D + col0;
    const T* vt = vc + next_row * D + r0 * D + col0;
    T* ks = stages + stage * C::STAGE_ELEMS + r0 * C::PITCH + col0;
    T* vs = ks + C::TK * C::PITCH;
    if (valid_rows == C::TK && wrap == C::TK) {
      // Almost every tile: all its keys are before the last query and none wraps, so no copy needs
      // a bound or a wrap test (on the H100 this loop is issue-bound; the tests were 4/5 of the load).
#pragma unroll
      for (int it = 0; it < C::TK / kRowStep; ++it) {
        cp_async16(ks + it * kRowStep * C::PITCH, kt + it * kRowStep * D, true);
        cp_async16(vs + it * kRowStep * C::PITCH, vt + it * kRowStep * D, true);
      }
    } else {
      const int64_t back = a.rows * D;
#pragma unroll
      for (int it = 0; it < C::TK / kRowStep; ++it) {
        const int r = r0 + it * kRowStep;
        const bool valid = r < valid_rows;
        const int64_t offset = valid ? it * kRowStep * D - (r >= wrap ? back : 0) : -(next_row + r0) * D - col0;
        cp_async16(ks + it * kRowStep * C::PITCH, kt + offset, valid);
        cp_async16(vs + it * kRowStep * C::PITCH, vt + offset, valid);
      }
    }
    // The keys' padding rides in the same stage: read in the loop, it would be a DRAM miss on the
    // critical path of every tile.
    if (pad != nullptr && threadIdx.x < C::TK) {
      const bool valid = int(threadIdx.x) < valid_rows;
      cp_async8(pads + stage * C::TK + threadIdx.x, pad + (valid ? next_key + threadIdx.x : 0), valid);
    }
    advance(next_key, next_row);
  };
  // The next tile not yet prefetched into L2, from tile STAGES - 1 on (the prologue loads the
  // ones before it): its K and V rows, two runs where the ring wraps; one thread for K, one for V.
  int pf_tile = C::STAGES - 1;
  int64_t pf_key = a.first_key + int64_t(t0 + pf_tile) * C::TK, pf_row = pf_key % a.rows;
  auto prefetch_next = [&]() {
    if (pf_tile < n && (threadIdx.x == 0 || threadIdx.x == 32)) {
      const int count = int(min(last - pf_key + 1, int64_t(C::TK)));
      const int before_wrap = int(min(a.rows - pf_row, int64_t(count)));
      const T* base = threadIdx.x == 0 ? kc : vc;
      PrefetchL2::copy(base + pf_row * D, before_wrap * D * int(sizeof(T)));
      if (count > before_wrap) PrefetchL2::copy(base, (count - before_wrap) * D * int(sizeof(T)));
    }
    ++pf_tile;
    advance(pf_key, pf_row);
  };
  for (int t = 0; t < sp.prefetch; ++t) prefetch_next();
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < n) load(s);
    cp_async_commit();
  }
  // The combine kernel (splits > 1) may be scheduled now; it waits for this grid's results.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  // Row r of the CTA is query r / G of head kvh * G + r % G. This warp's Q slice as A fragments,
  // loaded while the first tiles are on their way.
  // A lane's fragments come from two rows (lane / 4 and lane / 4 + 8 of its 16): one pointer each,
  // computed once (a division by G per fragment was most of the prologue's instructions).
  bool live[2];
  int64_t query[2];
  const T* q_row[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = mt * 16 + lane / 4 + half * 8;
    live[half] = row < R;
    const int64_t token = int64_t(b) * a.queries + (live[half] ? row / G : 0);
    query[half] = a.start + (live[half] ? row / G : 0);
    q_row[half] = static_cast<const T*>(a.q) + (token * a.q_heads + kvh * G + (live[half] ? row % G : 0)) * D +
                  ds * C::DS + 2 * (lane % 4);
  }
  uint32_t qf[C::DS / 16][4];
#pragma unroll
  for (int kk = 0; kk < C::DS / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      qf[kk][r] = live[r & 1] ? *reinterpret_cast<const uint32_t*>(q_row[r & 1] + kk * 16 + (r >> 1) * 8) : 0u;
  // Gemma's decode steps fill 2 to 8 of a warp's 16 rows: when rows 8-15 hold no query, their
  // softmax is skipped (their scores stay 0, as exp2(-inf) would make them).
  const bool upper_live = mt * 16 + 8 < R;
  float o[C::DS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max (log2 units) and per-lane sum
  const int mi = lane / 8, ri = lane % 8;                  // ldmatrix: lanes 8mi..8mi+7 address matrix mi's rows

  for (int i = 0; i < n; ++i) {
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();  // tile i has landed for everyone, and everyone is done with tile i - 1's stage
    if (i + C::STAGES - 1 < n) load((i + C::STAGES - 1) % C::STAGES);
    cp_async_commit();
    if (sp.prefetch > 0) prefetch_next();  // tile i + STAGES - 1 + prefetch
    const T* ks = stages + (i % C::STAGES) * C::STAGE_ELEMS + kg * 16 * C::PITCH + ds * C::DS;
    const T* vs = ks + C::TK * C::PITCH;

    float s[2][4] = {};  // scores: rows lane/4 (+8) x keys 8n + 2(lane%4) (+1)
#pragma unroll
    for (int kk = 0; kk < C::DS / 16; ++kk) {
      uint32_t bf[4];  // matrices: keys 0-7 / 8-15 (mi >> 1) x head dims 0-7 / 8-15 (mi & 1)
      ldmatrix_x4(bf, ks + ((mi >> 1) * 8 + ri) * C::PITCH + kk * 16 + (mi & 1) * 8);
      mma<T>(s[0], qf[kk], bf[0], bf[1]);
      mma<T>(s[1], qf[kk], bf[2], bf[3]);
    }
    reduce_splits<2, C::NS>(s, scratch + group * C::NS * 256, ds, lane, 1 + group);

    // Query minus key in 32 bits (both are token indices below the capacity), from this lane's first key.
    const int64_t key0 = a.first_key + int64_t(t0 + i) * C::TK + kg * 16 + 2 * (lane % 4);
    const int64_t* tile_pad = pads + (i % C::STAGES) * C::TK + kg * 16 + 2 * (lane % 4);
    bool token[2][2] = {{true, true}, {true, true}};  // [nn][e]: the key is no padding
    if (pad != nullptr) {
#pragma unroll
      for (int nn = 0; nn < 2; ++nn) {
        const longlong2 p = *reinterpret_cast<const longlong2*>(tile_pad + nn * 8);
        token[nn][0] = p.x != 0;
        token[nn][1] = p.y != 0;
      }
    }
    float alpha[2] = {1.f, 1.f};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (half == 1 && !upper_live) {
        s[0][2] = s[0][3] = s[1][2] = s[1][3] = 0.f;
        continue;
      }
      const int ahead = int(query[half] - key0);  // query index minus the lane's first key index
      float mx = -INFINITY;
#pragma unroll
      for (int nn = 0; nn < 2; ++nn)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int d = ahead - (nn * 8 + e);
          const bool seen = live[half] && d >= 0 && (window == 0 || d < window) && token[nn][e];
          float& x = s[nn][2 * half + e];
          x = seen ? x * kLog2e : -INFINITY;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[half], mx);
      const float base = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing seen yet stays at 0
      // 1 where the max did not move, a row without any key seen yet included (exp2(-inf) would
      // give 0 there, and the warp-wide skip of the rescale below would never happen).
      alpha[half] = m_new == m[half] ? 1.f : exp2f(m[half] - base);
      m[half] = m_new;
      l[half] *= alpha[half];
#pragma unroll
      for (int nn = 0; nn < 2; ++nn)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nn][2 * half + e];
          x = exp2f(x - base);
          l[half] += x;
        }
    }
    // Once the running maxima settle, no row's changes: the rescale is skipped warp-wide.
    if (!__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) {
#pragma unroll
      for (int d = 0; d < C::DS / 8; ++d) {
        o[d][0] *= alpha[0];
        o[d][1] *= alpha[0];
        o[d][2] *= alpha[1];
        o[d][3] *= alpha[1];
      }
    }
    warp_accumulate<2, C::DS, C::PITCH, T>(o, s, vs, lane);  // p rounded to T, as the eager path does
  }

  // Merge the key groups: their (max, sum) through shared memory, then the outputs, rescaled to the
  // merged max, summed in group order (the stages are free now and hold [NK][ROWS][D] floats).
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 1);
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 2);
    if (ds == 0 && lane % 4 == 0) {
      const int row = mt * 16 + lane / 4 + half * 8;
      stat_m[kg * C::ROWS + row] = m[half];
      stat_l[kg * C::ROWS + row] = l[half];
    }
  }
  __syncthreads();
  if (threadIdx.x < C::ROWS) {
    float mx = -INFINITY, sum = 0.f;
    for (int g = 0; g < C::NK; ++g) mx = fmaxf(mx, stat_m[g * C::ROWS + threadIdx.x]);
    const float base = mx == -INFINITY ? 0.f : mx;
    for (int g = 0; g < C::NK; ++g)
      sum += stat_l[g * C::ROWS + threadIdx.x] * exp2f(stat_m[g * C::ROWS + threadIdx.x] - base);
    row_m[threadIdx.x] = mx;
    row_l[threadIdx.x] = sum;
  }
  __syncthreads();
  float* merged = reinterpret_cast<float*>(stages);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = mt * 16 + lane / 4 + half * 8;
    const float base = row_m[row] == -INFINITY ? 0.f : row_m[row];
    const float f = exp2f(m[half] - base);
#pragma unroll
    for (int d = 0; d < C::DS / 8; ++d) {
      const int col = ds * C::DS + d * 8 + 2 * (lane % 4);
      *reinterpret_cast<float2*>(merged + (kg * C::ROWS + row) * D + col) =
          make_float2(o[d][2 * half] * f, o[d][2 * half + 1] * f);
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < R * (D / 4); idx += C::THREADS) {
    const int row = idx / (D / 4), col = (idx % (D / 4)) * 4;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int g = 0; g < C::NK; ++g) {
      const float4 x = *reinterpret_cast<const float4*>(merged + (g * C::ROWS + row) * D + col);
      sum.x += x.x;
      sum.y += x.y;
      sum.z += x.z;
      sum.w += x.w;
    }
    if (sp.splits == 1) {
      const float L = row_l[row];  // 0: the row sees no key; its output is 0 (don't-care)
      const float inv = L > 0.f ? 1.f / L : 0.f;
      const int64_t token = int64_t(b) * a.queries + row / G;
      T* out = static_cast<T*>(a.out) + (token * a.q_heads + kvh * G + row % G) * D + col;
      store4<T>(out, sum.x * inv, sum.y * inv, sum.z * inv, sum.w * inv);
    } else {
      const int64_t prow = ((int64_t(b) * a.kv_heads + kvh) * sp.splits + split) * R + row;
      *reinterpret_cast<float4*>(sp.o + prow * D + col) = sum;
      if (col == 0) {
        sp.m[prow] = row_m[row];
        sp.l[prow] = row_l[row];
      }
    }
  }
}

}  // namespace gemma4::impl::cuda::decode
