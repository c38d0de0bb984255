#pragma once
// Comparing a run with a second run rather than with a golden file (a training step of a model
// against another run of it: multithreaded_recompute, key_conventions), and the baseline family
// that reduced-precision results are judged against.
#include <exception>
#include <string>
#include <vector>

#include "conformance/check.h"
#include "golden/baseline.h"
#include "golden/golden_file.h"
#include "golden/tolerance.h"
#include "golden/verify.h"
#include "reference/model.h"

namespace gemma4::conformance {

// Forward and backward through `forward` (the backend's ops and hand-off) on the calling thread:
// outputs/loss, outputs/logits and grads/<weight name>.
golden::TensorMap training_step(const Config& config, const ModelWeights& weights, const golden::TensorMap& inputs,
                                const ForwardOptions& forward);
// The same with the weights widened to fp32 and the reference ops (a backend need not support
// fp32): the truth of the rule in bf16/f16.
golden::TensorMap fp32_training_step(const Config& config, const ModelWeights& weights, const golden::TensorMap& inputs,
                                     const ForwardOptions& forward);

// Judges `candidate` against `reference` (same names) on the judged positions (`judged`, as
// golden::model_judged gives them): loss and logits one row each, the gradients one row for the
// worst of them plus one per failing one (at most 8). With `bitwise`, each tensor must be bitwise
// equal; otherwise the tolerance policy decides (check_fp32 in fp32; in bf16/f16 the reduced-
// precision rule against `truth` with `reference`'s own error as the baseline: both are runs of
// the same implementation).
std::vector<Result> compare_runs(const golden::TensorMap& candidate, const golden::TensorMap& reference,
                                 const golden::TensorMap& truth, const golden::TensorMap& judged, torch::ScalarType dtype,
                                 bool bitwise);
// The rows of compare_runs recorded, each case name prefixed with `label`.
void record_comparison(Reporter& reporter, const std::string& label, const golden::TensorMap& candidate,
                       const golden::TensorMap& reference, const golden::TensorMap& truth, const golden::TensorMap& judged,
                       torch::ScalarType dtype, bool bitwise);

// A family member's name and its result on one tensor.
using Members = std::vector<std::pair<std::string, torch::Tensor>>;
// `candidate` against `truth` on the judged positions: check_fp32 in f32, else the reduced-
// precision rule with the largest errors of `family` (results computed the same way by the
// baseline family's members, in the same dtype).
golden::Verdict family_verdict(const torch::Tensor& candidate, const torch::Tensor& truth, const Members& family,
                               const torch::Tensor& judged, torch::ScalarType dtype);

// One row per dataset of a golden judgement (golden::judge): its verdict, or why it could not be judged.
void report(const golden::VerifyReport& verdicts, Reporter& reporter);

// The baseline family (golden/FORMAT.md, "Tolerance policy"): the in-tree legitimate variants that
// support the options' device and dtype. The golden generator and op_sweep use the same list.
std::vector<golden::FamilyMember> baseline_family(const torch::Device& device, torch::ScalarType dtype);

// The first line of an exception's message (c10 errors without their backtrace).
std::string error_message(const std::exception_ptr& error);

}  // namespace gemma4::conformance
