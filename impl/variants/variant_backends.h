#pragma once
// Legitimate variants: correct implementations of the Gemma-4 ops that round, accumulate or
// dispatch differently from the reference's eager ops, as real kernels do (PyTorch's SDPA and
// rms_norm, single-rounding fused kernels, FlashAttention's online softmax, fp32 attention, a paged KV cache).
// Each starts from the reference and replaces exactly one op. They exist so that the suite is
// shown to pass correct code that is not bitwise the reference: red must mean a bug.
#include <vector>

#include "impl/backend.h"

namespace gemma4::impl {

std::vector<Backend> variant_backends();

// A paged KV cache with a split-K decode attention (paged_kv_cache.cpp).
KvCacheOps paged_kv_cache_ops();

}  // namespace gemma4::impl
