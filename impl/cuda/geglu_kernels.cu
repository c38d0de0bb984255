// GeGLU, gelu_tanh(gate) * up (GEMMA4.md, Forward 4: the MLP, the experts and the PLE gate),
// forward and backward: 16-byte vector loads, fp32 math, one rounding per output.
#include <algorithm>
#include <initializer_list>

#include "impl/cuda/elementwise_kernels.h"

namespace gemma4::impl::cuda {
namespace {

using namespace kernels;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

struct Gelu {
  float value, grad;
};

// gelu_tanh(x) = 0.5 x (1 + t), t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3), so
// gelu_tanh'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
__device__ inline Gelu gelu_tanh(float x) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2/pi)
  constexpr float kKappa = 0.044715f;
  const float t = tanhf(kBeta * (x + kKappa * x * x * x));
  return {0.5f * x * (1.f + t), 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kBeta * (1.f + 3.f * kKappa * x * x)};
}

// The V elements at offset i.
template <typename T, int V>
__device__ inline void geglu_forward_at(const T* gate, const T* up, T* out, int64_t i) {
  float g[V], u[V];
  load<T, V>(gate + i, g);
  load<T, V>(up + i, u);
#pragma unroll
  for (int j = 0; j < V; ++j) g[j] = gelu_tanh(g[j]).value * u[j];
  store<T, V>(out + i, g);
}

template <typename T, int V>
__device__ inline void geglu_backward_at(const T* gate, const T* up, const T* dout, T* dgate, T* dup, int64_t i) {
  float g[V], u[V], dy[V];
  load<T, V>(gate + i, g);
  load<T, V>(up + i, u);
  load<T, V>(dout + i, dy);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const Gelu f = gelu_tanh(g[j]);
    g[j] = dy[j] * u[j] * f.grad;
    u[j] = dy[j] * f.value;
  }
  store<T, V>(dgate + i, g);
  store<T, V>(dup + i, u);
}

// Grid-stride over whole vectors of V elements; the n % V after the last one go one per thread.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) geglu_forward_kernel(const T* gate, const T* up, T* out, int64_t n) {
  const int64_t first = int64_t{blockIdx.x} * kThreads + threadIdx.x, stride = int64_t{gridDim.x} * kThreads;
  for (int64_t i = first * V; i + V <= n; i += stride * V) geglu_forward_at<T, V>(gate, up, out, i);
  if (const int64_t i = n / V * V + first; i < n) geglu_forward_at<T, 1>(gate, up, out, i);
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    geglu_backward_kernel(const T* gate, const T* up, const T* dout, T* dgate, T* dup, int64_t n) {
  const int64_t first = int64_t{blockIdx.x} * kThreads + threadIdx.x, stride = int64_t{gridDim.x} * kThreads;
  for (int64_t i = first * V; i + V <= n; i += stride * V) geglu_backward_at<T, V>(gate, up, dout, dgate, dup, i);
  if (const int64_t i = n / V * V + first; i < n) geglu_backward_at<T, 1>(gate, up, dout, dgate, dup, i);
}

// The widest vector (at most 16 bytes) to which every pointer is aligned.
template <typename T>
int vector_width(std::initializer_list<const void*> pointers) {
  for (int width = 16 / static_cast<int>(sizeof(T)); width > 1; width /= 2) {
    bool ok = true;
    for (const void* p : pointers) ok = ok && aligned(p, width * sizeof(T));
    if (ok) return width;
  }
  return 1;
}

int64_t grid_blocks(int64_t n, int width) {
  const int64_t vectors = (n + width - 1) / width;
  return std::min((vectors + kThreads - 1) / kThreads, kMaxBlocks);
}

}  // namespace

cudaError_t geglu_forward(DType dtype, const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  with_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    const int width = vector_width<T>({gate, up, out});
    with_width<T>(width, [&](auto v) {
      geglu_forward_kernel<T, decltype(v)::value><<<grid_blocks(n, width), kThreads, 0, stream>>>(
          static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), n);
    });
  });
  return cudaGetLastError();
}

cudaError_t geglu_backward(DType dtype, const void* gate, const void* up, const void* dout, void* dgate, void* dup,
                           int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  with_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    const int width = vector_width<T>({gate, up, dout, dgate, dup});
    with_width<T>(width, [&](auto v) {
      geglu_backward_kernel<T, decltype(v)::value><<<grid_blocks(n, width), kThreads, 0, stream>>>(
          static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<const T*>(dout), static_cast<T*>(dgate),
          static_cast<T*>(dup), n);
    });
  });
  return cudaGetLastError();
}

}  // namespace gemma4::impl::cuda
