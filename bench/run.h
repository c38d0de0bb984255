#pragma once
// Running one benchmark: prepare the case, warm up, time, set the counters, and turn each way a
// case can fail into a skipped benchmark with its reason.
#include <benchmark/benchmark.h>
#include <torch/types.h>

#include <functional>
#include <vector>

#include "bench/flop_model.h"

namespace gemma4::bench {

// Builds (or fetches from the case cache) what the benchmark needs; returns the step to time.
using Prepare = std::function<std::function<void()>()>;

// Runs `warmup` untimed steps when the case is new (case_cache.h), resets the peak-memory
// statistics, runs the timed loop (timing.h), then sets the counters: TFLOP/s and GB/s from `work`
// (per iteration, over the measured time) and, on CUDA, peak_mem_GiB (the caching allocator's peak
// of allocated bytes during the timed
// iterations: the case's inputs and weights, the 256 MiB L2-flush buffer and what the step
// allocates). Skips the benchmark (state.SkipWithError) instead, with:
//   "no CUDA device"          for a CUDA benchmark on a machine without one;
//   a Skip's reason           (e.g. the memory estimate exceeds the free memory);
//   "out of memory: ..."      on c10::OutOfMemoryError anywhere (the cached case is dropped);
//   "not supported: ..."      on any other c10::Error (an op that rejects the shape or dtype);
//   "error: ..."              on any other exception.
void run_benchmark(benchmark::State& state, const torch::Device& device, const Work& work, int warmup,
                   const Prepare& prepare);

// The warm-up every benchmark of this program gives run_benchmark: three untimed steps load the
// kernels, fill the caching allocator and settle cuBLAS/cuDNN's algorithm choice.
inline constexpr int kWarmup = 3;

// The step of an op: `forward` under NoGradGuard, or `forward` then the backward of its outputs
// against `upstream` w.r.t. `inputs` (torch::autograd::grad: the gradients are returned and
// dropped, never accumulated into .grad).
std::function<void()> op_step(bool backward, std::function<std::vector<torch::Tensor>()> forward,
                              std::vector<torch::Tensor> inputs, std::vector<torch::Tensor> upstream);

// A weight made on the device with reference/weights.h's random_weight distributions, drawn with
// torch's generator (the counter generator is CPU-only; the values do not matter for timing):
// uniform(0.5, 1.5) for 1-D tensors (norm scales, router scales, layer_scalar), else zero-mean
// uniform with variance 1 / fan_in (the last dimension).
torch::Tensor device_weight(at::IntArrayRef shape, const torch::TensorOptions& options);

}  // namespace gemma4::bench
