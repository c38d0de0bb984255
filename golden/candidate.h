#pragma once
// Candidate files: outputs computed by an implementation we cannot link (another language, a
// Python kernel, an inference engine), judged against a golden under the same tolerance policy
// (golden/FORMAT.md, "Candidate files").
#include <string>

#include "golden/golden_file.h"
#include "golden/verify.h"

namespace gemma4::golden {

// What the candidate was asked to compute.
enum class CandidateScope {
  kForwardAndBackward,  // outputs and every gradient
  kForwardOnly,         // outputs only: grads/ rows are "not checked" when absent
};

// Every dataset of an HDF5 candidate file, by its path from the root ("outputs/logits",
// "grads/layers.0.mlp.up_proj.weight"). Throws gemma4::Error naming the file when it cannot be
// read (missing, not HDF5, damaged). Read apart first (golden/untrusted.h): a file that crashes
// or hangs the HDF5 library is refused, after `timeout_seconds` at most for a hang.
TensorMap read_candidate(const std::string& path, int timeout_seconds = 60);

// read_golden for a file from outside the repository (golden check, golden verify PATH), read
// apart first in the same way.
GoldenCase read_untrusted_golden(const std::string& path, int timeout_seconds = 60);

// Judges `candidate` against the golden, one row per dataset of expected/ and one per dataset the
// golden does not have:
// - required and missing (outputs/logits, or an op/layer case's outputs; with kForwardAndBackward
//   also outputs/loss and every grads/...): fail;
// - optional and missing (intermediates an implementation may not expose: hidden states,
//   attention outputs, shared K/V; and grads/ under kForwardOnly): not checked;
// - unknown (no such dataset in expected/), integer, or of another shape: fail;
// - otherwise judged as `golden verify` judges the reference's recomputation (judged/ positions,
//   every value finite).
VerifyReport check_candidate(const GoldenCase& golden, const TensorMap& candidate, CandidateScope scope);

}  // namespace gemma4::golden
