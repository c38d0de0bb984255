#pragma once
// Backends that each reproduce one real Gemma-4 bug (GEMMA4.md, "Known failure modes"), so that
// every check of the conformance suite is shown to fail when the thing it guards is broken.
// Each starts from the reference (reference_layer_ops(), the reference hand-off) and changes
// exactly one thing.
#include <string>
#include <vector>

#include "impl/backend.h"

namespace gemma4::impl {

// The op-level bugs (faulty_ops.cpp, faulty_numeric_ops.cpp), the shared-KV hand-off bugs
// (faulty_kv_handoff.cpp), then the decoding bugs (faulty_decode.cpp, faulty_cache_bugs.cpp).
std::vector<Backend> faulty_backends();

// The two halves, and the starting point of each faulty backend: the reference ops and hand-off,
// deterministic, with its name, the one-line description of the bug (and its public source), the
// categories in which the bug must show, and whether it hides below bf16/f16 rounding.
std::vector<Backend> faulty_op_backends();
std::vector<Backend> faulty_numeric_backends();  // numeric bug classes reported against Gemma and LLM ports
std::vector<Backend> faulty_kv_handoff_backends();
std::vector<Backend> faulty_decode_backends();  // KV-cache decoding bugs of inference engines
std::vector<Backend> faulty_cache_backends();   // bugs of a wrapped sliding cache and of speculative rollback
std::vector<Backend> faulty_fp8_kv_cache_backends();  // bugs of fp8 KV caches: scales, rings, K as V
std::vector<Backend> faulty_long_context_backends();  // bugs below bf16 resolution on short rows, visible at real length
std::vector<Backend> faulty_model_op_backends();  // embedding scale, router, layer_scalar, soft-cap, masking, dW accumulation
std::vector<Backend> faulty_accumulator_backends();  // bf16 accumulators: RMSNorm's mean of squares, projection GEMMs
// A bug declared in golden or decode is declared in real_size too (the same computations at the
// released sizes), unless below_resolution_at_real_size takes it out.
Backend faulty_backend(std::string name, std::string description, std::vector<Category> fails_in,
                       bool below_reduced_precision = false);
// For a bug that the tiny goldens catch in every dtype but that is below bf16's resolution at the
// released windows (one key more or fewer among 512 or 1024, a draft kept in a cache of 500 keys):
// real_size leaves its declared categories. Measured on golden/real (FORMAT.md, "Real-size
// goldens"): each fails there in f32, and passes bf16.
void below_resolution_at_real_size(Backend& backend);

}  // namespace gemma4::impl
