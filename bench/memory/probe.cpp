#include "bench/memory/probe.h"

#include <ATen/ATen.h>

#include <cmath>

#include "conformance/tracking_allocator.h"
#include "reference/error.h"

#ifdef GEMMA4_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace gemma4::memory {
namespace {

#ifdef GEMMA4_WITH_CUDA
c10::DeviceIndex index_of(const torch::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}
#endif

}  // namespace

void initialise_allocator(const torch::Device& device) {
  if (device.is_cuda()) at::empty({1}, torch::TensorOptions().device(device));
}

Probe::Probe(const torch::Device& device) : device_(device) {
  if (!device.is_cuda()) conformance::install_tracking_cpu_allocator();
  initialise_allocator(device);
}

int64_t Probe::live() const {
  if (!device_.is_cuda()) return conformance::tracked_cpu_live_bytes();
#ifdef GEMMA4_WITH_CUDA
  c10::cuda::device_synchronize();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device_)).allocated_bytes[0].current;
#else
  throw Error("built without CUDA: no caching-allocator statistics");
#endif
}

int64_t Probe::peak() const {
  if (!device_.is_cuda()) return conformance::tracked_cpu_peak_bytes();
#ifdef GEMMA4_WITH_CUDA
  c10::cuda::device_synchronize();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device_)).allocated_bytes[0].peak;
#else
  throw Error("built without CUDA: no caching-allocator statistics");
#endif
}

void Probe::reset_peak() const {
  if (!device_.is_cuda()) return conformance::reset_tracked_cpu_peak();
#ifdef GEMMA4_WITH_CUDA
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device_));
#endif
}

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
