#include "bench/timing.h"

#include <ATen/ATen.h>

#include <chrono>

#ifdef GEMMA4_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#endif

#include "bench/skip.h"

namespace gemma4::bench {
namespace {

void cpu_loop(benchmark::State& state, const std::function<void()>& step) {
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    step();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

#ifdef GEMMA4_WITH_CUDA
constexpr int64_t kL2FlushBytes = int64_t{256} << 20;

void cuda_loop(benchmark::State& state, const torch::Device& device, const std::function<void()>& step) {
  // Allocated on first use and never freed (so not destroyed after CUDA at exit): it is part of
  // every CUDA benchmark's resident memory.
  static const at::Tensor& flush =
      *new at::Tensor(at::empty({kL2FlushBytes}, at::TensorOptions().dtype(at::kByte).device(device)));
  // Events with timing enabled (CUDAEvent's default flags disable it).
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  for (auto _ : state) {
    flush.zero_();
    start.record();
    step();
    stop.record();
    stop.synchronize();
    state.SetIterationTime(static_cast<double>(start.elapsed_time(stop)) / 1e3);
  }
}
#endif

}  // namespace

void timed_loop(benchmark::State& state, const torch::Device& device, const std::function<void()>& step) {
  if (!device.is_cuda()) return cpu_loop(state, step);
#ifdef GEMMA4_WITH_CUDA
  cuda_loop(state, device, step);
#else
  throw Skip("built without CUDA support");
#endif
}

}  // namespace gemma4::bench
