#include "bench/run.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <string>

#include "bench/case_cache.h"
#include "bench/device.h"
#include "bench/skip.h"
#include "bench/timing.h"

namespace gemma4::bench {
namespace {

// A counter of `per_iteration` units, reported per second of measured time.
benchmark::Counter rate(double per_iteration) {
  return benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

std::string first_line(const char* text) {
  const std::string s = text;
  return s.substr(0, s.find('\n'));
}

void measure(benchmark::State& state, const torch::Device& device, const Work& work, int warmup,
             const Prepare& prepare) {
  if (device.is_cuda() && !cuda_available()) throw Skip("no CUDA device");
  const std::function<void()> step = prepare();
  // Only a new case is warmed up: google-benchmark calls the function again for each repetition
  // (and while it sizes the iteration count), back to back on the same tensors.
  static uint64_t warmed = 0;
  if (cases_built() != warmed) {
    for (int i = 0; i < warmup; ++i) step();
    warmed = cases_built();
  }
  reset_peak_memory(device);
  timed_loop(state, device, step);
  if (work.flop > 0) state.counters["TFLOP/s"] = rate(work.flop / 1e12);
  if (work.bytes > 0) state.counters["GB/s"] = rate(work.bytes / 1e9);
  if (device.is_cuda()) state.counters["peak_mem_GiB"] = static_cast<double>(peak_memory_bytes(device)) / (1 << 30);
}

}  // namespace

void run_benchmark(benchmark::State& state, const torch::Device& device, const Work& work, int warmup,
                   const Prepare& prepare) {
  try {
    measure(state, device, work, warmup, prepare);
  } catch (const Skip& e) {
    state.SkipWithError(e.what());
  } catch (const c10::OutOfMemoryError& e) {
    drop_cached_case();
    state.SkipWithError(("out of memory: " + first_line(e.what_without_backtrace())).c_str());
  } catch (const c10::Error& e) {
    state.SkipWithError(("not supported: " + first_line(e.what_without_backtrace())).c_str());
  } catch (const std::exception& e) {
    state.SkipWithError((std::string("error: ") + first_line(e.what())).c_str());
  }
}

std::function<void()> op_step(bool backward, std::function<std::vector<torch::Tensor>()> forward,
                              std::vector<torch::Tensor> inputs, std::vector<torch::Tensor> upstream) {
  if (!backward) {
    return [forward] {
      at::NoGradGuard no_grad;
      forward();
    };
  }
  return [forward, inputs, upstream] {
    torch::autograd::grad(forward(), inputs, upstream, /*retain_graph=*/false, /*create_graph=*/false,
                          /*allow_unused=*/true);
  };
}

torch::Tensor device_weight(at::IntArrayRef shape, const torch::TensorOptions& options) {
  const torch::Tensor w = at::empty(shape, options);
  if (shape.size() == 1) return w.uniform_(0.5, 1.5);
  const double a = std::sqrt(3.0 / static_cast<double>(shape.back()));  // variance a^2 / 3 = 1 / fan_in
  return w.uniform_(-a, a);
}

}  // namespace gemma4::bench
