#pragma once
// The tolerance policy: when a computed tensor counts as equal to a golden one. One module, used by
// `gemma4-conform golden verify` and by the conformance suite. golden/FORMAT.md, "Tolerance
// policy", gives every bound and the reason for it.
#include <torch/types.h>

#include <string>

namespace gemma4::golden {

// Forward activations and gradients get different bounds: gradients pass through about twice as
// many reductions.
enum class Role { kForward, kGradient };
Role role_of(const std::string& dataset);  // "grads/..." -> kGradient, else kForward

// Agreement of `candidate` with `reference`, computed in float64.
struct Metrics {
  double cosine = 0;   // <a, b> / (|a| |b|); 1 when both are zero, 0 when only one is
  double nmse = 0;     // mse(reference, candidate) / mse(reference, 0); 0 when both are zero
  double max_abs = 0;  // max |candidate - reference|
  double max_rel = 0;  // max_abs / max |reference| (the error relative to the tensor's scale)
  double ref_max = 0;  // max |reference|
};
Metrics measure(const torch::Tensor& candidate, const torch::Tensor& reference);

struct Verdict {
  Metrics metrics;     // of the candidate against the truth (reduced precision) or the golden (fp32)
  double error = 0;    // the judged quantity: max_abs
  double bound = 0;    // the largest error that passes
  double cosine_min = 0;  // fp32 only: the cosine floor (0 under the FlashAttention rule)
  double baseline_error = 0;  // reduced precision only: max_abs of the same-dtype eager baseline vs truth
  bool pass = false;
  std::string rule;    // "fp32" or "flash-attention"
};

// fp32: max_abs <= 1e-4 * max|golden| and cosine >= 0.99999.
Verdict check_fp32(const torch::Tensor& candidate, const torch::Tensor& golden, Role role);

// bf16/f16, the FlashAttention rule: max|candidate - truth| <= k * max|baseline - truth| + u * max|truth|,
// k = 2 forward and 3 for gradients, u the unit roundoff of `dtype`. `baseline` is a same-dtype
// eager implementation (the golden's expected/), `truth` the float32 computation (truth/).
Verdict check_reduced_precision(const torch::Tensor& candidate, const torch::Tensor& baseline,
                                const torch::Tensor& truth, torch::ScalarType dtype, Role role);

double unit_roundoff(torch::ScalarType dtype);  // 2^-24 f32, 2^-8 bf16, 2^-11 f16

}  // namespace gemma4::golden
