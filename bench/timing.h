#pragma once
// The timed loop of a benchmark (google-benchmark manual time: state.SetIterationTime).
//  - CUDA: before every iteration, outside the timed region, a 256 MiB buffer (larger than the L2
//    of any current GPU: 50 MiB on H100, 60 MiB on H200) is zeroed so no input is served from L2;
//    then CUDA events on the current stream bracket the step, and the iteration time is the
//    events' elapsed time. Work that the step enqueues on other streams must be joined to the
//    current stream before it returns (autograd's backward does this).
//  - CPU: wall-clock time of the step (steady_clock); no cache flush.
#include <benchmark/benchmark.h>
#include <torch/types.h>

#include <functional>

namespace gemma4::bench {

void timed_loop(benchmark::State& state, const torch::Device& device, const std::function<void()>& step);

}  // namespace gemma4::bench
