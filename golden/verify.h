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
  std::string problem;  // set when there was nothing to compare (the reference did not produce it)
};

struct VerifyReport {
  std::vector<TensorCheck> checks;  // in dataset order
  bool pass() const;
  int failures() const;
};

VerifyReport verify_golden(const GoldenCase& golden, const torch::Device& device);

// Judges `candidate` (dataset name -> tensor, as recompute returns) against the golden: fp32 files
// by check_fp32 against expected/, bf16/f16 files by the FlashAttention rule with expected/ as the
// same-dtype baseline and truth/ as the truth.
VerifyReport judge(const GoldenCase& golden, const TensorMap& candidate);

}  // namespace gemma4::golden
