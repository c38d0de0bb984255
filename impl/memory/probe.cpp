#include "impl/memory/probe.h"

#include <ATen/ATen.h>

#include "impl/memory/tracking_allocator.h"
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
  if (!device.is_cuda()) install_tracking_cpu_allocator();
  initialise_allocator(device);
}

int64_t Probe::live() const {
  if (!device_.is_cuda()) return tracked_cpu_live_bytes();
#ifdef GEMMA4_WITH_CUDA
  c10::cuda::device_synchronize();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device_)).allocated_bytes[0].current;
#else
  throw Error("built without CUDA: no caching-allocator statistics");
#endif
}

int64_t Probe::peak() const {
  if (!device_.is_cuda()) return tracked_cpu_peak_bytes();
#ifdef GEMMA4_WITH_CUDA
  c10::cuda::device_synchronize();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device_)).allocated_bytes[0].peak;
#else
  throw Error("built without CUDA: no caching-allocator statistics");
#endif
}

void Probe::reset_peak() const {
  if (!device_.is_cuda()) return reset_tracked_cpu_peak();
#ifdef GEMMA4_WITH_CUDA
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device_));
#endif
}

}  // namespace gemma4::memory
