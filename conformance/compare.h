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

// Judges one run (the candidate) against another run of the same implementation (the
// reference), tensor by tensor: loss and logits one row each, the gradients one row for the worst
// of them plus one per failing one (at most 8). With `bitwise`, each tensor must be bitwise equal;
// otherwise the tolerance policy decides (check_fp32 in fp32; in bf16/f16 the reduced-precision
// rule against the fp32 `truth` with the reference's own error as the baseline). Only verdicts are
// kept, so tensors can be added one at a time and freed: a sharded model's gradients are gathered
// and judged per parameter on the device they live on (golden::measure computes there).
class RunComparison {
 public:
  RunComparison(torch::ScalarType dtype, bool bitwise) : dtype_(dtype), bitwise_(bitwise) {}
  // `candidate` undefined: missing from the candidate run. `truth` is needed in bf16/f16 only;
  // `judged` (undefined: every position) as golden::model_judged gives it.
  void add(const std::string& name, const torch::Tensor& candidate, const torch::Tensor& reference,
           const torch::Tensor& truth, const torch::Tensor& judged);
  std::vector<Result> rows() const;

 private:
  torch::ScalarType dtype_;
  bool bitwise_;
  std::vector<Result> rows_;  // loss, logits, missing tensors and the first failing gradients
  int grads_ = 0, failed_ = 0;
  double worst_ratio_ = -1;
  golden::Verdict worst_;
  std::string worst_name_;
};

// A RunComparison of two whole runs (same names), on the judged positions.
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
