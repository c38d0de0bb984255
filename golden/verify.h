#pragma once
// golden verify: recompute a golden file with the reference and judge every dataset of expected/
// under the tolerance policy.
#include <torch/types.h>

#include <string>
#include <vector>

#include "golden/golden_file.h"
#include "golden/tolerance.h"

namespace gemma4::golden {

struct TensorCheck {
  std::string name;     // "outputs/logits", "grads/layers.0.mlp.up_proj.weight"
  Verdict verdict;
  std::string problem;  // set when there was nothing to compare (the candidate did not produce it)
  bool checked = true;  // false: a dataset the candidate may leave out, and did ("not checked")
  bool pass() const { return checked && problem.empty() && verdict.pass; }
  bool failed() const { return checked && !pass(); }
};

struct VerifyReport {
  std::vector<TensorCheck> checks;  // in dataset order
  bool pass() const;                // nothing failed, and something was checked
  int failures() const;
  int not_checked() const;
};

VerifyReport verify_golden(const GoldenCase& golden, const torch::Device& device);

// Judges `candidate` (dataset name -> tensor, as recompute returns) against the golden on the judged
// positions (judged/), every value finite: fp32 files by check_fp32 against expected/, bf16/f16
// files by the family rule against truth/, the baseline family's errors leaving out the member
// named `candidate_name` (a candidate is never its own baseline).
VerifyReport judge(const GoldenCase& golden, const TensorMap& candidate, const std::string& candidate_name = "");

}  // namespace gemma4::golden
