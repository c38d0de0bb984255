#include "golden/candidate.h"

#include "golden/h5_tensors.h"
#include "golden/untrusted.h"
#include "reference/error.h"

namespace gemma4::golden {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// Whether the golden's dataset `name` must be in the candidate. Model goldens' per-layer
// intermediates are optional (an engine may fuse them away); their logits, and every output of an
// op or layer case, are the point of the computation.
bool required(const GoldenCase& g, const std::string& name, CandidateScope scope) {
  const bool backward = scope == CandidateScope::kForwardAndBackward;
  if (starts_with(name, "grads/")) return backward;
  if (g.kind != "model") return true;
  return name == "outputs/logits" || (name == "outputs/loss" && backward);
}

}  // namespace

TensorMap read_candidate(const std::string& path, int timeout_seconds) {
  auto read = [&path] { return read_tree(h5::File::open_read(path), "/"); };
  probe_in_child(path, [&read] { read(); }, timeout_seconds);
  return read();
}

GoldenCase read_untrusted_golden(const std::string& path, int timeout_seconds) {
  probe_in_child(path, [&path] { read_golden(path); }, timeout_seconds);
  return read_golden(path);
}

VerifyReport check_candidate(const GoldenCase& g, const TensorMap& candidate, CandidateScope scope) {
  // Present, floating and of the golden's shape go to judge(); the rest are settled here.
  TensorMap judgeable;
  std::map<std::string, TensorCheck> settled;
  for (const auto& [name, t] : candidate) {
    const auto expected = g.expected.find(name);
    if (expected == g.expected.end()) {
      settled[name] = {name, {}, "unknown dataset: the golden has no expected/" + name};
    } else if (!t.is_floating_point()) {
      settled[name] = {name, {}, std::string("not floating point (") + c10::toString(t.scalar_type()) + ")"};
    } else {
      judgeable[name] = t.to(torch::kFloat32);  // judge() reports a shape mismatch by name
    }
  }
  VerifyReport report;
  for (TensorCheck& row : judge(g, judgeable).checks) {
    if (settled.count(row.name)) {
      row = settled.at(row.name);
    } else if (!candidate.count(row.name)) {
      row.problem = "not in the candidate";
      row.checked = required(g, row.name, scope);
      if (row.checked && starts_with(row.name, "grads/")) row.problem += " (required unless --forward-only)";
      if (!row.checked) row.problem += starts_with(row.name, "grads/") ? " (forward only)" : " (optional intermediate)";
    }
    report.checks.push_back(std::move(row));
  }
  for (auto& [name, row] : settled) {
    if (!g.expected.count(name)) report.checks.push_back(std::move(row));  // unknown: after the golden's rows
  }
  return report;
}

}  // namespace gemma4::golden
