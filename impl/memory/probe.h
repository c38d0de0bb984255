#pragma once
// A device's allocated bytes and their peak, as the activation-memory measurements (bench/memory)
// read them: the CUDA caching allocator's statistics, or the tracking CPU allocator's.
#include <torch/types.h>

#include <cstdint>

namespace gemma4::memory {

// Allocated bytes of one device: the CUDA caching allocator's statistics (aggregate pool), or the
// tracking CPU allocator (tracking_allocator.h; installed on first use; only differences count).
class Probe {
 public:
  explicit Probe(const torch::Device& device);
  int64_t live() const;  // synchronises the device first
  int64_t peak() const;  // the most live bytes since reset_peak
  void reset_peak() const;

 private:
  torch::Device device_;
};

// The caching allocator has no statistics for a device before its first allocation.
void initialise_allocator(const torch::Device& device);

}  // namespace gemma4::memory
