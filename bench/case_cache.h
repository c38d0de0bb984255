#pragma once
// google-benchmark calls a benchmark's function several times (to find the iteration count, then
// once per repetition). The tensors of the case being measured (weights, inputs, masks) are kept
// here between those calls instead of being rebuilt each time. One case at a time: asking for
// another key releases the previous case, and its cached device memory, before building.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace gemma4::bench {

namespace detail {
void* cached_case(const std::string& key, const torch::Device& device, double bytes_needed,
                  const std::function<std::shared_ptr<void>()>& make);
}

// The case under `key`, built by `make` when it is not the cached one. Before building on CUDA,
// throws Skip when `bytes_needed` (memory_estimate.h) exceeds the free device memory.
template <class Case>
Case& cached_case(const std::string& key, const torch::Device& device, double bytes_needed,
                  const std::function<Case()>& make) {
  return *static_cast<Case*>(detail::cached_case(
      key, device, bytes_needed, [&] { return std::shared_ptr<void>(std::make_shared<Case>(make())); }));
}

// Releases the cached case (after an out-of-memory error).
void drop_cached_case();

// How many cases have been built so far: a change tells the caller that the case it got is new
// (run.h warms a case up once, not on each of google-benchmark's calls).
uint64_t cases_built();

}  // namespace gemma4::bench
