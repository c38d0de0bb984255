#include "bench/device.h"

#include <benchmark/benchmark.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <cstdio>
#include <string>

#ifdef GEMMA4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

#include "git_sha.h"

namespace gemma4::bench {
namespace {

#ifdef GEMMA4_WITH_CUDA
c10::DeviceIndex index_of(const torch::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}

// 13000 -> "13.0"
std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The first line nvidia-smi prints for the query, or "" when it cannot be run.
std::string nvidia_smi(const std::string& query) {
  FILE* pipe = popen(("nvidia-smi --query-gpu=" + query + " --format=csv,noheader 2>/dev/null").c_str(), "r");
  if (!pipe) return "";
  char line[256] = {0};
  const bool read = std::fgets(line, sizeof line, pipe) != nullptr;
  pclose(pipe);
  std::string out = read ? line : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}
#endif

}  // namespace

bool cuda_available() { return torch::cuda::is_available(); }

void release_cached_memory(const torch::Device& device) {
#ifdef GEMMA4_WITH_CUDA
  if (device.is_cuda() && cuda_available()) {
    c10::cuda::CUDAGuard guard(index_of(device));
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#else
  (void)device;
#endif
}

int64_t free_device_bytes(const torch::Device& device) {
#ifdef GEMMA4_WITH_CUDA
  if (!device.is_cuda() || !cuda_available()) return 0;
  release_cached_memory(device);
  c10::cuda::CUDAGuard guard(index_of(device));
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return static_cast<int64_t>(free);
#else
  (void)device;
  return 0;
#endif
}

void reset_peak_memory(const torch::Device& device) {
#ifdef GEMMA4_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device));
#else
  (void)device;
#endif
}

int64_t peak_memory_bytes(const torch::Device& device) {
#ifdef GEMMA4_WITH_CUDA
  if (device.is_cuda()) {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device)).allocated_bytes[0].peak;
  }
#else
  (void)device;
#endif
  return 0;
}

void add_run_context(int repetitions) {
  benchmark::AddCustomContext("git_sha", GEMMA4_GIT_SHA);
  benchmark::AddCustomContext("torch", TORCH_VERSION);
  benchmark::AddCustomContext("repetitions", std::to_string(repetitions));
  std::string gpu = "none";
#ifdef GEMMA4_WITH_CUDA
  if (cuda_available()) {
    gpu = at::cuda::getDeviceProperties(c10::cuda::current_device())->name;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    const std::string smi_driver = nvidia_smi("driver_version");
    benchmark::AddCustomContext("nvidia_driver", smi_driver.empty() ? "unknown (nvidia-smi unavailable)" : smi_driver);
    benchmark::AddCustomContext("cuda_driver_api", cuda_version_string(driver));
    benchmark::AddCustomContext("cuda_runtime", cuda_version_string(runtime));
    const auto& hooks = at::detail::getCUDAHooks();
    benchmark::AddCustomContext("cudnn", hooks.hasCuDNN() ? std::to_string(hooks.versionCuDNN()) : "none");
    // Which physical GPU: the history (bench-history) tells hosts of one GPU kind apart by it, since
    // every lent machine calls itself "vm".
    const std::string uuid = nvidia_smi("uuid");
    benchmark::AddCustomContext("gpu_uuid", uuid.empty() ? "unknown (nvidia-smi unavailable)" : uuid);
  }
#endif
  benchmark::AddCustomContext("gpu", gpu);
}

}  // namespace gemma4::bench
