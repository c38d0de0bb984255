#pragma once
// Comparing a training step with another run of the same model, for the checks whose reference is
// a second run rather than a golden file (multithreaded_recompute, key_conventions).
#include <exception>
#include <string>

#include "conformance/check.h"
#include "golden/golden_file.h"
#include "reference/model.h"

namespace gemma4::conformance {

// Forward and backward through `forward` (the backend's ops and hand-off) on the calling thread:
// outputs/loss, outputs/logits and grads/<weight name>.
golden::TensorMap training_step(const Config& config, const ModelWeights& weights, const golden::TensorMap& inputs,
                                const ForwardOptions& forward);
// The same with the weights widened to fp32: the truth of the FlashAttention rule in bf16/f16.
golden::TensorMap fp32_training_step(const Config& config, const ModelWeights& weights, const golden::TensorMap& inputs,
                                     const ForwardOptions& forward);

// Records `candidate` against `reference` (same names): loss and logits one row each, the
// gradients one row for the worst of them plus one per failing one (at most 8). With `bitwise`,
// each tensor must be bitwise equal; otherwise the tolerance policy decides (check_fp32 in fp32;
// in bf16/f16 the FlashAttention rule with `reference` as the baseline and `truth` as the truth).
void record_comparison(Reporter& reporter, const std::string& label, const golden::TensorMap& candidate,
                       const golden::TensorMap& reference, const golden::TensorMap& truth, torch::ScalarType dtype,
                       bool bitwise);

// The first line of an exception's message (c10 errors without their backtrace).
std::string error_message(const std::exception_ptr& error);

}  // namespace gemma4::conformance
