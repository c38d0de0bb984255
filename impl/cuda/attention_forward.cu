// Fused attention forward (FlashAttention-2 style, scale 1): one CTA per block of query rows and
// head, streaming the key/value tiles that intersect the band through double-buffered shared memory,
// with an online softmax in fp32 (GEMMA4.md, Forward: attention uses scale 1 after the q/k norms).
// Head dims 64 and 256 run on the Hopper kernel instead (hopper_attention_forward.cu); this one
// serves 512 until that kernel covers it.
#include "impl/cuda/attention_common.cuh"
#include "impl/cuda/hopper_attention.h"

namespace gemma4::impl::cuda {
namespace {

using namespace tile;

// Per head dim: RG row groups of 16 query rows; NS warps per row group, each contracting Q K^T over
// D/NS columns and owning D/NS columns of O (NS = 2 at D 512 keeps O at 128 fp32 registers per
// thread); BC keys per tile.
template <int D>
struct ForwardConfig {
  static constexpr int RG = D == 256 ? 8 : 4, NS = D == 512 ? 2 : 1, BC = D == 512 ? 32 : 64;
  static constexpr int THREADS = RG * NS * 32, BR = RG * 16, DS = D / NS, NT = BC / 8;
  template <typename T>
  static constexpr int bytes(int stages) {
    return tile_bytes<T, D>(BR) + 2 * stages * tile_bytes<T, D>(BC) + (NS > 1 ? RG * NS * NT * 128 * 4 : 0);
  }
  template <typename T>
  static constexpr int stages() {
    return bytes<T>(2) <= kMaxSharedBytes ? 2 : 1;
  }
};

template <typename T, int D, int STAGES>
__global__ void __launch_bounds__(ForwardConfig<D>::THREADS, 1) attention_forward_kernel(AttentionForwardArgs a) {
  using C = ForwardConfig<D>;
  constexpr int PITCH = D + kPad, DS = C::DS, NT = C::NT, BC = C::BC, BR = C::BR;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = sq + BR * PITCH;           // STAGES key tiles
  T* sv = sk + STAGES * BC * PITCH;  // STAGES value tiles
  float* scratch = reinterpret_cast<float*>(sv + STAGES * BC * PITCH);

  const AttentionShape& s = a.shape;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rg = warp % C::RG, split = warp / C::RG;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BR, hk = h / (s.q_heads / s.kv_heads);
  const int64_t q_stride = int64_t(s.q_heads) * D;
  const T* q = static_cast<const T*>(a.q) + (int64_t(b) * s.seq * s.q_heads + h) * D;
  const T* k = static_cast<const T*>(a.k) + (int64_t(b) * s.kv_heads + hk) * s.seq * D;
  const T* v = static_cast<const T*>(a.v) + (int64_t(b) * s.kv_heads + hk) * s.seq * D;
  const int32_t* valid = a.key_valid ? a.key_valid + int64_t(b) * s.seq : nullptr;

  const TileRange tiles = band_tiles(s, q0, BR, BC, /*rows_are_queries=*/true);
  const int steps = tiles.last - tiles.first + 1;
  auto load_kv = [&](int i, int stage) {  // step i: key tile tiles.first + i
    const int k0 = (tiles.first + i) * BC;
    load_tile<BC, D, C::THREADS>(sk + stage * BC * PITCH, k + int64_t(k0) * D, D, s.seq - k0);
    load_tile<BC, D, C::THREADS>(sv + stage * BC * PITCH, v + int64_t(k0) * D, D, s.seq - k0);
  };
  load_tile<BR, D, C::THREADS>(sq, q + q0 * q_stride, q_stride, s.seq - q0);
  load_kv(0, 0);
  cp_async_commit();

  // This thread's two rows of the warp's 16: lane/4 and lane/4 + 8.
  const int row0 = q0 + rg * 16 + lane / 4;
  const int rows[2] = {row0, row0 + 8};
  float o[DS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int i = 0; i < steps; ++i) {
    const int stage = begin_step<STAGES>(i, steps, load_kv);
    float p[NT][4];
    warp_scores<NT, DS, PITCH>(p, sq + rg * 16 * PITCH + split * DS, sk + stage * BC * PITCH + split * DS, lane);
    reduce_splits<NT, C::NS>(p, scratch + rg * C::NS * NT * 128, split, lane, 1 + rg);

    const int k0 = (tiles.first + i) * BC;
    if (!tile_unmasked(s, valid, q0, BR, k0, BC, true)) {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!allowed(s, valid, rows[e / 2], k0 + n * 8 + 2 * (lane % 4) + (e & 1))) p[n][e] = -INFINITY;
    }
    // Online softmax: rescale what was accumulated to the new row maximum. A row with no allowed
    // key so far keeps m = -inf and uses 0 as its reference, so exp gives 0 and never NaN.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(p[n][2 * r], p[n][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float ref = m_new == -INFINITY ? 0.f : m_new * kLog2e;
      const float rescale = exp2f(m[r] * kLog2e - ref);
      m[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        p[n][2 * r] = exp2f(p[n][2 * r] * kLog2e - ref);
        p[n][2 * r + 1] = exp2f(p[n][2 * r + 1] * kLog2e - ref);
        sum += p[n][2 * r] + p[n][2 * r + 1];
      }
      l[r] = l[r] * rescale + sum;  // a per-thread partial sum; the quad is summed at the end
#pragma unroll
      for (int n = 0; n < DS / 8; ++n) {
        o[n][2 * r] *= rescale;
        o[n][2 * r + 1] *= rescale;
      }
    }
    warp_accumulate<NT, DS, PITCH>(o, p, sv + stage * BC * PITCH + split * DS, lane);
    end_step<STAGES>(i, steps, load_kv);
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffff, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffff, l[r], 2);
    inv[r] = l[r] > 0.f ? 1.f / l[r] : 0.f;
    // A row that sees no key at all (all padding) gets o = 0 and lse = +inf, so the backward's
    // exp(s - lse) is 0 for it: a don't-care row (golden/FORMAT.md), finite in both directions.
    if (split == 0 && lane % 4 == 0 && rows[r] < s.seq) {
      a.lse[(int64_t(b) * s.q_heads + h) * s.seq + rows[r]] = l[r] > 0.f ? m[r] + logf(l[r]) : INFINITY;
    }
  }
  T* out = static_cast<T*>(a.o) + (int64_t(b) * s.seq * s.q_heads + h) * D + split * DS;
  store_rows<DS>(out + int64_t(q0 + rg * 16) * q_stride, q_stride, 0, s.seq - (q0 + rg * 16), o, inv, lane);
}

}  // namespace

bool attention_head_dim_supported(int head_dim) { return head_dim == 64 || head_dim == 256 || head_dim == 512; }

const char* launch_attention_forward(AttentionDtype dtype, const AttentionForwardArgs& args, cudaStream_t stream) {
  const AttentionShape& s = args.shape;
  if (hopper::forward_supported(s.head_dim)) {
    hopper::launch_forward(dtype, args, stream);
    return cuda_status(nullptr);
  }
  const bool built = dispatch(dtype, s.head_dim, [&](auto type_tag, auto dim_tag) {
    using T = decltype(type_tag);
    constexpr int D = decltype(dim_tag)::value;
    if constexpr (D == 512) {  // the other head dims are the Hopper kernel's
      using C = ForwardConfig<D>;
      constexpr int stages = C::template stages<T>();
      constexpr int bytes = C::template bytes<T>(stages);
      static_assert(bytes <= kMaxSharedBytes, "forward tiles exceed shared memory");
      auto kernel = attention_forward_kernel<T, D, stages>;
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      const dim3 grid((s.seq + C::BR - 1) / C::BR, s.q_heads, s.batch);
      kernel<<<grid, C::THREADS, bytes, stream>>>(args);
    }
  });
  return cuda_status(built ? nullptr : "attention forward: head dim not built (64, 256, 512)");
}

}  // namespace gemma4::impl::cuda
