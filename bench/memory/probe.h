#pragma once
// What every measurement of bench/memory shares: reading a device's allocated bytes and peak, and
// making weights and inputs whose gradient buffers belong to the baseline.
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "bench/memory/points.h"
#include "reference/config.h"
#include "reference/weights.h"

namespace gemma4::memory {

// Allocated bytes of one device: the CUDA caching allocator's statistics (aggregate pool), or the
// suite's tracking CPU allocator (installed on first use; only differences count).
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

// A weight of `shape`: ones for 1-D tensors (norm scales, layer_scalar), else zero-mean with
// variance 1 / fan_in. Values do not change what is allocated; they keep the step finite.
torch::Tensor random_weight(const std::vector<int64_t>& shape, const torch::TensorOptions& options);

// Makes `t` a leaf that needs gradient, with a gradient buffer already allocated (so that backward
// accumulates in place and the buffer belongs to the baseline, not to the step).
void with_grad_buffer(torch::Tensor& t);

// Fills every slot with random_weight; in training, trainable ones get gradient buffers.
void fill_slots(const std::vector<WeightSlot>& slots, bool train, const torch::TensorOptions& options);

}  // namespace gemma4::memory
