#pragma once
// The tolerance policy: when a computed tensor counts as equal to a golden one. One module, used by
// `gemma4-conform golden verify` and by the conformance suite. golden/FORMAT.md, "Tolerance
// policy", gives every bound, the reason for it and the measured margins.
#include <torch/types.h>

#include <string>

namespace gemma4::golden {

// Forward activations and gradients are reported apart (the separation table keeps them apart).
enum class Role { kForward, kGradient };
Role role_of(const std::string& dataset);  // "grads/..." -> kGradient, else kForward

enum class Rule {
  kFp32,              // fp32 files and runs: against expected/ directly
  kReducedPrecision,  // bf16/f16: against truth/, scaled by the baseline family's errors
};
const char* rule_name(Rule rule);  // "fp32", "family"

// Agreement of `candidate` with `reference`, computed in float64 over the judged positions (a mask
// of 1/0 broadcastable to both; undefined: every position).
struct Metrics {
  double cosine = 0;   // <a, b> / (|a| |b|); 1 when both are zero, 0 when only one is
  double nmse = 0;     // mse(reference, candidate) / mse(reference, 0); 0 when both are zero
  double max_abs = 0;  // max |candidate - reference|
  double max_rel = 0;  // max_abs / max |reference| (the error relative to the tensor's scale)
  double ref_max = 0;  // max |reference|
  double rms = 0;      // sqrt(mean (candidate - reference)^2)
  double ref_rms = 0;  // sqrt(mean reference^2)
};
Metrics measure(const torch::Tensor& candidate, const torch::Tensor& reference,
                const torch::Tensor& judged = torch::Tensor());

// How far legitimate same-dtype implementations land from the truth on one dataset: the largest
// max-abs and RMS error among the members of the baseline family (FORMAT.md), and who set them.
struct BaselineError {
  double max_abs = 0, rms = 0;
  std::string max_abs_by, rms_by;
};

struct Verdict {
  Rule rule = Rule::kFp32;
  Metrics metrics;         // the candidate against the golden (fp32) or the truth (reduced precision)
  BaselineError baseline;  // reduced precision only
  double max_bound = 0;    // the largest max-abs error that passes
  double rms_bound = 0;    // reduced precision: the largest RMS error that passes (fp32: 0, not judged)
  double cosine_min = 0;   // fp32: the cosine floor
  int64_t non_finite = 0;  // NaN or infinity anywhere, judged positions or not: always a failure
  bool pass = false;

  // The judged quantity closest to its bound: max-abs or RMS, whichever has the larger ratio.
  bool rms_decides() const;
  double error() const;
  double bound() const;
  double ratio() const;  // error() / bound(); infinity when not finite
  std::string baseline_error_text() const;  // "baseline max 1.2e-02 rms 3.4e-03" for a report row
};

// fp32: max_abs <= 1e-4 * max|golden| and cosine >= 0.99999 over the judged positions.
Verdict check_fp32(const torch::Tensor& candidate, const torch::Tensor& golden, const torch::Tensor& judged = {});

// bf16/f16: max|c - t| <= k_max * B_max + u * max|t| and rms(c - t) <= k_rms * B_rms + u * rms(t)
// over the judged positions, B the baseline family's largest errors and u the dtype's unit roundoff.
Verdict check_reduced_precision(const torch::Tensor& candidate, const torch::Tensor& truth,
                                const BaselineError& baseline, torch::ScalarType dtype,
                                const torch::Tensor& judged = {});

double unit_roundoff(torch::ScalarType dtype);  // 2^-24 f32, 2^-8 bf16, 2^-11 f16

}  // namespace gemma4::golden
