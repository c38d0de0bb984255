#pragma once
// The closed-form estimate of activation memory (ACTIVATION_MEMORY.md, "Estimate"): bytes from
// the geometry alone (hidden size, MLP width, heads, head dims, window, experts, PLE width,
// vocabulary), per part and phase, for the two kernel sets measured: the reference's ops and the
// cuda backend's fused ones. The stack is the same combination of part figures as the measurement
// (stack.h), so estimate and measurement differ only in where the part figures come from.
#include <cstdint>
#include <string>

#include "bench/memory/points.h"
#include "bench/memory/stack.h"
#include "reference/config.h"

namespace gemma4::memory {

enum class Kernels {
  kReference,  // reference/layer_ops.cpp: eager attention ([B, Hq, S, S] scores), unfused norms, RoPE, GeGLU
  kFused,      // the cuda backend: tiled attention, fused q/k norm + RoPE and GeGLU; reference RMSNorm
};
// "reference" -> kReference, "cuda" / "cuda-deterministic" -> kFused; throws gemma4::Error otherwise.
Kernels kernels_of_backend(const std::string& backend);

// The estimated figures of one part (a layer kind or kEdges) in one step.
PartFigures estimate_part(const Config& config, Part part, Phase phase, const StepShape& shape, Kernels kernels,
                          int64_t element_bytes);

// The estimate of a point: a part's peak, or the stack combined from estimated parts. Points hold
// a part's or the stack's peak; element_bytes 2 (bf16).
double estimate_bytes(const Config& config, const MemoryPoint& point, int64_t element_bytes = 2);

}  // namespace gemma4::memory
