#pragma once
// What the benchmarks ask of the device: availability, free memory, the caching allocator's peak,
// and the run's provenance for the JSON context. CPU devices answer trivially.
#include <torch/types.h>

#include <cstdint>

namespace gemma4::bench {

bool cuda_available();

// Returns cached blocks to the driver, then reports the free bytes (CUDA only).
int64_t free_device_bytes(const torch::Device& device);
void release_cached_memory(const torch::Device& device);

// The caching allocator's peak of allocated bytes since the last reset (CUDA only).
void reset_peak_memory(const torch::Device& device);
int64_t peak_memory_bytes(const torch::Device& device);

// benchmark::AddCustomContext: GPU name and UUID, NVIDIA driver, CUDA driver API and runtime, cuDNN,
// torch, git commit and repetitions (Google Benchmark records the host name, CPU and date).
void add_run_context(int repetitions);

}  // namespace gemma4::bench
