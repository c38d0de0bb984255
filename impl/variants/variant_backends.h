#pragma once
// Legitimate variants: correct implementations of the Gemma-4 ops that round, accumulate or
// dispatch differently from the reference's eager ops, as real kernels do (PyTorch's SDPA and
// rms_norm, single-rounding fused kernels, FlashAttention's online softmax, fp32 attention).
// Each starts from the reference and replaces exactly one op. They exist so that the suite is
// shown to pass correct code that is not bitwise the reference: red must mean a bug.
#include <vector>

#include "impl/backend.h"

namespace gemma4::impl {

std::vector<Backend> variant_backends();

}  // namespace gemma4::impl
