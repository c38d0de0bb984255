#pragma once
// Thrown while preparing or running a benchmark to skip it with a reason that the report shows
// verbatim (state.SkipWithError): no CUDA device, more memory than is free, not supported.
#include <stdexcept>

namespace gemma4::bench {

struct Skip : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace gemma4::bench
