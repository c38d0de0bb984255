#include "bench/memory/step_tensors.h"

#include <cmath>

namespace gemma4::memory {

torch::Tensor random_weight(const std::vector<int64_t>& shape, const torch::TensorOptions& options) {
  if (shape.size() == 1) return torch::ones(shape, options);
  return torch::randn(shape, options).mul_(1.0 / std::sqrt(static_cast<double>(shape.back())));
}

void with_grad_buffer(torch::Tensor& t) {
  t.requires_grad_(true);
  t.mutable_grad() = torch::zeros_like(t);
}

void fill_slots(const std::vector<WeightSlot>& slots, bool train, const torch::TensorOptions& options) {
  for (const WeightSlot& slot : slots) {
    *slot.tensor = random_weight(slot.shape, options);
    if (train && slot.trainable) with_grad_buffer(*slot.tensor);
  }
}

}  // namespace gemma4::memory
