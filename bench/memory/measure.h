#pragma once
// Measuring activation memory (ACTIVATION_MEMORY.md): one part of a geometry (a decoder layer of
// one kind, or the edges) in one phase, its bytes above its baseline read from the device's
// allocator; and the whole stack combined from its parts as a planner sums it.
#include <torch/types.h>

#include <optional>
#include <string>

#include "bench/memory/points.h"
#include "bench/memory/stack.h"
#include "impl/backend.h"
#include "reference/config.h"

namespace gemma4::memory {

// Measures `part` (a layer kind or kEdges) of `config` with `backend`'s ops and KV cache, weights
// and inputs random on `device` in `dtype`. Throws c10::OutOfMemoryError when it does not fit,
// gemma4::Error on a request that makes no sense.
PartFigures measure_part(const Config& config, Part part, Phase phase, const StepShape& shape,
                         const impl::Backend& backend, const torch::Device& device, torch::ScalarType dtype);

// The free bytes of the device (CUDA: cudaMemGetInfo plus what the caching allocator holds unused);
// nullopt on the CPU.
std::optional<double> free_device_bytes(const torch::Device& device);
// "NVIDIA H200", or "cpu".
std::string device_name(const torch::Device& device);
// Returns cached blocks to the device (CUDA), after an out-of-memory error or between geometries.
void release_cached_memory(const torch::Device& device);

}  // namespace gemma4::memory
