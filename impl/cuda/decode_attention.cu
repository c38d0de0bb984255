// Decode attention's launch side (decode_attention_kernels.h): the split plan, the split kernel
// (decode_split_kernel.cuh, where the design is explained) and the kernel that combines the splits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "impl/cuda/decode_attention_kernels.h"
#include "impl/cuda/decode_split_kernel.cuh"
#include "impl/cuda/decode_splits.h"
#include "impl/cuda/device_setup.h"

namespace gemma4::impl::cuda {
namespace {

using decode::decode_attention_kernel;
using decode::DecodeConfig;
using decode::SplitArgs;
using decode::store4;

constexpr int kCombineWarps = 8;
constexpr int kCombineThreads = 32 * kCombineWarps;
constexpr int kCombineColumns = 128;  // a block's columns: 4 per lane

// Block-wide max or sum over kCombineThreads threads, the same order every time.
template <bool kMax>
__device__ inline float block_reduce(float x, float* red) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, d);
    x = kMax ? fmaxf(x, y) : x + y;
  }
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
  __syncthreads();
  x = red[0];
  for (int w = 1; w < kCombineWarps; ++w) x = kMax ? fmaxf(x, red[w]) : x + red[w];
  __syncthreads();  // red may be reused
  return x;
}

// One block per (batch, kv head, row) and 128 columns: out = sum_s o_s 2^(m_s - M) / sum_s l_s 2^(m_s - M).
// Its warps take every 8th split (a long cache of few heads has a hundred splits or more, whose
// loads must overlap), then add their sums in warp order. Launched as a programmatic dependent of
// the split kernel: it is resident early and waits for that grid's results (griddepcontrol).
template <typename T>
__global__ void __launch_bounds__(kCombineThreads)
    decode_combine_kernel(const DecodeAttentionArgs a, const SplitArgs sp) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  extern __shared__ float weight[];  // [splits]
  __shared__ float red[kCombineWarps];
  __shared__ float4 part[kCombineWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, D = a.head_dim;
  const int G = a.q_heads / a.kv_heads, R = G * a.queries;
  const int row = blockIdx.x % R, bh = blockIdx.x / R;
  const int64_t first = int64_t(bh) * sp.splits * R + row;  // split s: first + s * R
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < sp.splits; s += kCombineThreads) mx = fmaxf(mx, sp.m[first + int64_t(s) * R]);
  mx = block_reduce<true>(mx, red);
  const float base = mx == -INFINITY ? 0.f : mx;
  float sum = 0.f;
  for (int s = threadIdx.x; s < sp.splits; s += kCombineThreads) {
    const float w = exp2f(sp.m[first + int64_t(s) * R] - base);
    weight[s] = w;
    sum += w * sp.l[first + int64_t(s) * R];
  }
  sum = block_reduce<false>(sum, red);  // its barrier also publishes weight[]
  const int col = blockIdx.y * kCombineColumns + lane * 4;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (col < D) {
#pragma unroll 4
    for (int s = warp; s < sp.splits; s += kCombineWarps) {
      const float w = weight[s];
      const float4 x = *reinterpret_cast<const float4*>(sp.o + (first + int64_t(s) * R) * D + col);
      acc.x += w * x.x;
      acc.y += w * x.y;
      acc.z += w * x.z;
      acc.w += w * x.w;
    }
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (warp != 0 || col >= D) return;
  acc = part[0][lane];
  for (int w = 1; w < kCombineWarps; ++w) {
    acc.x += part[w][lane].x;
    acc.y += part[w][lane].y;
    acc.z += part[w][lane].z;
    acc.w += part[w][lane].w;
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  const int b = bh / a.kv_heads, kvh = bh % a.kv_heads;
  const int64_t token = int64_t(b) * a.queries + row / G;
  T* out = static_cast<T*>(a.out) + (token * a.q_heads + kvh * G + row % G) * D + col;
  store4<T>(out, acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
}

// Calls f(T{}, integral_constant<D>, integral_constant<MT>, integral_constant<stages>) for the
// dtype, head dim, rows and pipeline stages (3 or 4); false when the head dim is not built.
template <typename F>
bool dispatch_decode(AttentionDtype dtype, int head_dim, int rows, int stages, F&& f) {
  auto with_mt = [&](auto type_tag, auto dim_tag) {
    auto with_s = [&](auto mt_tag) {
      if (stages == 4) {
        f(type_tag, dim_tag, mt_tag, std::integral_constant<int, 4>{});
      } else {
        f(type_tag, dim_tag, mt_tag, std::integral_constant<int, 3>{});
      }
    };
    if (rows <= 16) {
      with_s(std::integral_constant<int, 1>{});
    } else {
      with_s(std::integral_constant<int, 2>{});
    }
  };
  auto with_dim = [&](auto type_tag) {
    switch (head_dim) {
      case 64:
        with_mt(type_tag, std::integral_constant<int, 64>{});
        return true;
      case 128:
        with_mt(type_tag, std::integral_constant<int, 128>{});
        return true;
      case 256:
        with_mt(type_tag, std::integral_constant<int, 256>{});
        return true;
      case 512:
        with_mt(type_tag, std::integral_constant<int, 512>{});
        return true;
      default:
        return false;
    }
  };
  return dtype == AttentionDtype::kBFloat16 ? with_dim(__nv_bfloat16{}) : with_dim(__half{});
}

// How many CTAs of the kernel fit an SM, its shared-memory opt-in made (once per device).
template <typename T, int D, int MT, int S>
int blocks_per_sm(int device) {
  using C = DecodeConfig<D, MT, S>;
  constexpr int bytes = C::template bytes<T>();
  static_assert(bytes <= kMaxSharedBytes, "decode tiles exceed shared memory");
  return resident_blocks<decode_attention_kernel<T, D, MT, S>, C::THREADS, bytes>(device);
}

int rows_of(const DecodeAttentionArgs& a) { return a.q_heads / a.kv_heads * a.queries; }

// The combine kernel as a programmatic dependent launch (its launch overlaps the split kernel's
// run); a plain launch where the attribute is refused.
template <typename T>
void launch_combine(const DecodeAttentionArgs& a, const SplitArgs& sp, int rows, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(int64_t(a.batch) * a.kv_heads * rows),
                        unsigned((a.head_dim + kCombineColumns - 1) / kCombineColumns));
  config.blockDim = dim3(kCombineThreads);
  config.dynamicSmemBytes = sp.splits * sizeof(float);
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  if (cudaLaunchKernelEx(&config, decode_combine_kernel<T>, a, sp) != cudaSuccess) {
    (void)cudaGetLastError();
    decode_combine_kernel<T><<<config.gridDim, config.blockDim, config.dynamicSmemBytes, stream>>>(a, sp);
  }
}

}  // namespace

bool decode_attention_supported(int head_dim, int q_heads, int kv_heads, int queries) {
  const bool dim = decode_tile_keys(head_dim) != 0;  // the head dims built
  return dim && kv_heads > 0 && q_heads % kv_heads == 0 && queries >= 1 && queries <= kMaxDecodeQueries &&
         q_heads / kv_heads * queries <= kMaxDecodeRows;
}

// Stages, prefetch and CTAs an SM depend on the GPU's peak DRAM bandwidth per SM, measured on the
// two we have (bench/README.md, "Stages and bytes in flight"; the 24 bf16 decode cases, cuDNN in
// the same runs). kLowBandwidthPerSmGBps is a threshold between them, not a model; other GPUs are
// unmeasured. A step of at most kFewTiles key tiles (of 8192 elements of K and of V: 32 KB in
// bf16; 4096 tiles are 128 MiB, about 1 MB an SM) is "small".
//  - H200 (4.8 TB/s, 36 GB/s an SM): small steps take 4 stages, one CTA an SM with three tiles in
//    flight; larger ones 3 stages, two CTAs an SM, whose second CTA hides the first's per-tile
//    chain. Up to 4096 tiles 4 stages win or tie all but two cases, which they lose by 1.5% (E4B
//    global, 32k B 1 and 4k B 8), and win by up to 14% (E4B sliding B 64: 31.4 us against 36.4);
//    above, they lose 7-17% (31B sliding B 64: 320 us against 275). No L2 prefetch: one tile
//    ahead makes every 3-stage case 9-14% slower (31B global 32k B 1: 95.6 us against 88.0).
//    Splits planned for two CTAs an SM: planned for one, the large global steps lose 6-7%
//    (31B global 32k B 8: 585.6 us against 550.6).
//  - H100 (3.35 TB/s, 25 GB/s an SM): one CTA of 3 stages already draws what the SM can. Every
//    step takes 3 stages, and the splits are planned for one CTA an SM: a second CTA on an SM adds
//    no bandwidth there, only the combine kernel (31B sliding B 8 split in two: 68.1 us against
//    62.5 unsplit) or an uneven share (31B global 32k B 1: 113.5 us against 120.1). 4 stages, or
//    5 and 6, are slower (31B sliding B 8: 66.0, 69.2-70.2). Large steps also have the TMA unit
//    fetch each CTA's next key tile into L2 beyond its stages: 2-6% faster (31B sliding B 64:
//    377 us against 390; 2 and 4 tiles ahead are slower), while the small ones lose up to 1 us
//    with it (31B sliding 32k B 1: 18.1 against 17.0).
constexpr double kLowBandwidthPerSmGBps = 30.0;
constexpr int64_t kFewTiles = 4096;

// Splits: choose_decode_splits (decode_splits.h) over every SM's CTAs, one an SM on a GPU of low
// bandwidth per SM (above).
DecodePlan plan_decode_attention(AttentionDtype dtype, const DecodeAttentionArgs& a) {
  DecodePlan plan;
  const int rows = rows_of(a);
  const int tk = decode_tile_keys(a.head_dim);
  const int64_t pairs = int64_t(a.batch) * a.kv_heads;
  const int64_t tiles = tk == 0 ? 0 : (a.start + a.queries - a.first_key + tk - 1) / tk;
  int device = 0;
  cudaGetDevice(&device);
  const DeviceFacts facts = device_facts(device);
  const bool low_bandwidth = facts.gbps_per_sm > 0 && facts.gbps_per_sm < kLowBandwidthPerSmGBps;
  const bool small = pairs * tiles <= kFewTiles;
  plan.stages = small && !low_bandwidth ? 4 : 3;
  plan.prefetch = low_bandwidth && !small ? 1 : 0;
  dispatch_decode(dtype, a.head_dim, rows, plan.stages, [&](auto type_tag, auto dim_tag, auto mt_tag, auto s_tag) {
    using T = decltype(type_tag);
    constexpr int D = decltype(dim_tag)::value, MT = decltype(mt_tag)::value, S = decltype(s_tag)::value;
    using C = DecodeConfig<D, MT, S>;
    static_assert(C::TK * D == 8192, "a tile is 8192 elements at every head dim (decode_tile_keys)");
    const int64_t slots = int64_t(facts.sms) * (low_bandwidth ? 1 : blocks_per_sm<T, D, MT, S>(device));
    const DecodeSplits splits = choose_decode_splits(tiles, pairs, slots);
    plan.splits = splits.splits;
    plan.tiles_per_split = splits.tiles_per_split;
    if (plan.splits > 1) plan.workspace_bytes = size_t(pairs) * plan.splits * rows * (D + 2) * sizeof(float);
  });
  return plan;
}

const char* launch_decode_attention(AttentionDtype dtype, const DecodeAttentionArgs& a, const DecodePlan& plan,
                                    void* workspace, cudaStream_t stream) {
  if (!decode_attention_supported(a.head_dim, a.q_heads, a.kv_heads, a.queries)) {
    return "decode attention: unsupported shape (head dims 64/128/256/512, at most 16 queries and 32 rows)";
  }
  const int rows = rows_of(a);
  SplitArgs sp;
  sp.splits = plan.splits;
  sp.tiles_per_split = plan.tiles_per_split;
  sp.prefetch = plan.prefetch;
  if (plan.splits > 1) {
    if (workspace == nullptr) return "decode attention: the split plan needs a workspace";
    const int64_t prows = int64_t(a.batch) * a.kv_heads * plan.splits * rows;
    sp.o = static_cast<float*>(workspace);
    sp.m = sp.o + prows * a.head_dim;
    sp.l = sp.m + prows;
  }
  int device = 0;
  cudaGetDevice(&device);
  dispatch_decode(dtype, a.head_dim, rows, plan.stages, [&](auto type_tag, auto dim_tag, auto mt_tag, auto s_tag) {
    using T = decltype(type_tag);
    constexpr int D = decltype(dim_tag)::value, MT = decltype(mt_tag)::value, S = decltype(s_tag)::value;
    using C = DecodeConfig<D, MT, S>;
    blocks_per_sm<T, D, MT, S>(device);  // the shared-memory opt-in
    decode_attention_kernel<T, D, MT, S>
        <<<dim3(plan.splits, a.kv_heads, a.batch), C::THREADS, C::template bytes<T>(), stream>>>(a, sp);
    if (plan.splits > 1) launch_combine<T>(a, sp, rows, stream);
  });
  return cuda_status(nullptr);
}

}  // namespace gemma4::impl::cuda
