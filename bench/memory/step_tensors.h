#pragma once
// The weights and inputs of a measured step (measure.cpp, measure_model.cpp), made so that their
// gradient buffers belong to the baseline, not to the step. The bytes are read by impl/memory/probe.h.
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "reference/weights.h"

namespace gemma4::memory {

// A weight of `shape`: ones for 1-D tensors (norm scales, layer_scalar), else zero-mean with
// variance 1 / fan_in. Values do not change what is allocated; they keep the step finite.
torch::Tensor random_weight(const std::vector<int64_t>& shape, const torch::TensorOptions& options);

// Makes `t` a leaf that needs gradient, with a gradient buffer already allocated (so that backward
// accumulates in place and the buffer belongs to the baseline, not to the step).
void with_grad_buffer(torch::Tensor& t);

// Fills every slot with random_weight; in training, trainable ones get gradient buffers.
void fill_slots(const std::vector<WeightSlot>& slots, bool train, const torch::TensorOptions& options);

}  // namespace gemma4::memory
