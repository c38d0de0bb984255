#pragma once
// Launchers of the cuda backend's fused elementwise kernels (qk_norm_rope_kernels.cu,
// geglu_kernels.cu): raw device pointers, sizes and a stream, no torch, so that the .cu files
// compile without torch headers. Tensors are contiguous; each launcher returns cudaGetLastError().
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gemma4::impl::cuda {

enum class DType { kFloat32, kBFloat16, kFloat16 };

// x [B, S, H, D] seen as B*S*H < 2^32 rows of D elements, one per (token, head).
struct RowShape {
  int64_t batch, seq, heads, head_dim;
};

// y = rope(rms(x) * weight), with rms(x) = x * rsqrt(mean(x^2) + eps) in fp32 (GEMMA4.md,
// Forward 3 and 5).
struct NormRopeForwardArgs {
  const void* x;           // [B, S, H, D]
  const void* weight;      // [D] in x's dtype or fp32 (weight_fp32), or null: no scale (v_norm)
  bool weight_fp32;
  const void* cos;         // [S, D] in x's dtype ([B, S, D] with per_token_rope), or null: no RoPE
  const void* sin;         // as cos, null with cos
  void* y;                 // [B, S, H, D], or [B, H, S, D] when transposed
  void* y_unscaled;        // or null: also rms(x) alone, as y is laid out (K=V: v from the raw key)
  bool transposed;
  float eps;
  bool per_token_rope;     // cos and sin are [B, S, D], each batch row its own positions (decoding)
};

struct NormRopeBackwardArgs {
  const void* x;              // the forward's x, weight, cos and sin
  const void* weight;
  bool weight_fp32;
  const void* cos;
  const void* sin;
  const void* dy;             // laid out as the forward's y
  const void* dy_unscaled;    // or null: no y_unscaled output
  bool transposed;
  float eps;
  void* dx;                   // [B, S, H, D]
  void* dweight;              // [D] the weight's gradient, in the dtype the weight is read in (fp32
                              // or x's); or null: none (always null without a weight)
  bool per_token_rope;        // as the forward's
};

// One tensor of a layer's norm + RoPE forward or backward: its q, k or v.
struct NormRopeForwardJob {
  RowShape shape;
  NormRopeForwardArgs args;
};
struct NormRopeBackwardJob {
  RowShape shape;
  NormRopeBackwardArgs args;
};
constexpr int kMaxNormRopeJobs = 3;

// A layer's q, k and v (1 to kMaxNormRopeJobs jobs of one dtype and head dim): in one launch of the
// staged kernel where it takes them all (bf16 and fp16 rows of 16-byte vectors), the rest one
// register-kernel launch each.
cudaError_t norm_rope_forward(DType dtype, const NormRopeForwardJob* jobs, int count, cudaStream_t stream);
// The bytes of device memory norm_rope_backward needs for these jobs' weight gradients (0 without
// any): the blocks' partial sums and the counters that order their reduction.
size_t norm_rope_backward_workspace(const NormRopeBackwardJob* jobs, int count);
// A layer's q, k and v (1 to kMaxNormRopeJobs jobs of one dtype): one launch of the backward kernel
// for the jobs that share a head dim, token count and instance (vector width, weight dtype), the
// weight gradients (deterministic) included, after a memset of the workspace's counters.
cudaError_t norm_rope_backward(DType dtype, const NormRopeBackwardJob* jobs, int count, void* workspace,
                               cudaStream_t stream);

// out = gelu_tanh(gate) * up over n elements.
cudaError_t geglu_forward(DType dtype, const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream);
// dgate = dout * up * gelu_tanh'(gate), dup = dout * gelu_tanh(gate).
cudaError_t geglu_backward(DType dtype, const void* gate, const void* up, const void* dout, void* dgate, void* dup,
                           int64_t n, cudaStream_t stream);

}  // namespace gemma4::impl::cuda

#ifdef __CUDACC__
// Device helpers shared by the two .cu files: fp32 math on 16-bit storage, vectorised access.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gemma4::impl::cuda::kernels {

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }

// Round to nearest even: the one rounding of each output.
template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) { return x; }
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ inline __half from_float<__half>(float x) { return __float2half_rn(x); }

// V consecutive elements moved as one aligned access (16 bytes for V = 16 / sizeof(T)).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ inline void load(const T* p, float (&out)[V]) {
  const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = to_float(pack.v[j]);
}

template <typename T, int V>
__device__ inline void store(T* p, const float (&in)[V]) {
  Pack<T, V> pack;
#pragma unroll
  for (int j = 0; j < V; ++j) pack.v[j] = from_float<T>(in[j]);
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
}

inline bool aligned(const void* p, size_t bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Calls launch(T{}) with the element type of `dtype`.
template <typename Launch>
void with_dtype(DType dtype, Launch&& launch) {
  switch (dtype) {
    case DType::kFloat32: return launch(float{});
    case DType::kBFloat16: return launch(__nv_bfloat16{});
    case DType::kFloat16: return launch(__half{});
  }
}

// Calls launch(std::integral_constant<int, width>) for a width of 1, 2, 4 or (16-bit T) 8.
template <typename T, typename Launch>
void with_width(int width, Launch&& launch) {
  if constexpr (sizeof(T) <= 2) {
    if (width == 8) return launch(std::integral_constant<int, 8>{});
  }
  if (width == 4) return launch(std::integral_constant<int, 4>{});
  if (width == 2) return launch(std::integral_constant<int, 2>{});
  launch(std::integral_constant<int, 1>{});
}

}  // namespace gemma4::impl::cuda::kernels
#endif
