#include "golden/verify.h"

#include "golden/baseline.h"
#include "golden/catalogue.h"
#include "reference/error.h"

namespace gemma4::golden {

bool VerifyReport::pass() const { return failures() == 0 && not_checked() < int(checks.size()); }

int VerifyReport::failures() const {
  int n = 0;
  for (const TensorCheck& c : checks) n += c.failed() ? 1 : 0;
  return n;
}

int VerifyReport::not_checked() const {
  int n = 0;
  for (const TensorCheck& c : checks) n += c.checked ? 0 : 1;
  return n;
}

VerifyReport judge(const GoldenCase& g, const TensorMap& candidate, const std::string& candidate_name) {
  const torch::ScalarType dtype = dtype_from_name(g.dtype);
  VerifyReport report;
  for (const auto& [name, expected] : g.expected) {
    TensorCheck check{name, {}, ""};
    const auto judged = g.judged.find(name);
    const torch::Tensor mask = judged == g.judged.end() ? torch::Tensor() : judged->second;
    auto it = candidate.find(name);
    if (it == candidate.end()) {
      check.problem = "not computed by the candidate";
    } else if (it->second.sizes() != expected.sizes()) {
      check.problem = "shape " + shape_string(it->second.sizes()) + ", expected " + shape_string(expected.sizes());
    } else if (dtype == torch::kFloat32) {
      check.verdict = check_fp32(it->second, expected, mask);
    } else {
      check.verdict = check_reduced_precision(it->second, g.truth.at(name), baseline_error(g, name, candidate_name),
                                              dtype, mask);
    }
    report.checks.push_back(std::move(check));
  }
  return report;
}

VerifyReport verify_golden(const GoldenCase& g, const torch::Device& device) { return judge(g, recompute(g, device)); }

}  // namespace gemma4::golden
