#include "conformance/verdict.h"

#include <algorithm>
#include <map>
#include <set>

#include "conformance/check.h"

namespace gemma4::conformance {

const char* category_state_name(CategoryState s) {
  switch (s) {
    case CategoryState::kPass: return "pass";
    case CategoryState::kFail: return "fail";
    case CategoryState::kNotSupported: return "not_supported";
    case CategoryState::kNotRun: return "not_run";
  }
  return "?";
}

CategoryVerdict category_verdict(const Run& run, Category category) {
  CategoryVerdict v;
  v.category = category;
  std::set<std::string> tests, judged, failed, reasons;
  for (const Result& r : run.results) {
    if (r.category != category) continue;
    tests.insert(r.test);
    if (r.status != Status::kNotSupported) judged.insert(r.test);
    if (r.status == Status::kNotSupported && !r.detail.empty()) reasons.insert(r.detail);
    if (r.status == Status::kFail) failed.insert(r.test), v.failing.push_back(r);
  }
  v.tests = static_cast<int>(tests.size());
  v.judged_tests = static_cast<int>(judged.size());
  v.failed_tests = static_cast<int>(failed.size());
  if (!v.failing.empty()) {
    v.state = CategoryState::kFail;
    std::stable_sort(v.failing.begin(), v.failing.end(), [](const Result& a, const Result& b) { return a.ratio() > b.ratio(); });
    v.worst_ratio = v.failing.front().ratio();
    v.worst_at = v.failing.front().test + (v.failing.front().case_name.empty() ? "" : " " + v.failing.front().case_name);
  } else if (v.judged_tests > 0) {
    v.state = CategoryState::kPass;
  } else if (v.tests > 0) {
    v.state = CategoryState::kNotSupported;
    int shown = 0;
    for (const std::string& why : reasons) {
      if (shown++ == 3) break;
      v.why += (v.why.empty() ? "" : "; ") + why;
    }
    if (v.why.empty()) v.why = "not supported";
  }
  return v;
}

std::vector<Category> categories_run(const Run& run) {
  std::vector<Category> out;
  for (const CategoryInfo& info : categories()) {
    for (const Result& r : run.results) {
      if (r.category == info.category) {
        out.push_back(info.category);
        break;
      }
    }
  }
  return out;
}

bool is_legitimate(const impl::Backend& b) {
  return b.kind == impl::BackendKind::kReference || b.kind == impl::BackendKind::kFused ||
         b.kind == impl::BackendKind::kVariant;
}

Expectation expectation_for(const impl::Backend& b, torch::ScalarType dtype) {
  if (is_legitimate(b)) return Expectation::kPass;
  return b.below_reduced_precision && dtype != torch::kFloat32 ? Expectation::kMayPass : Expectation::kFail;
}

Declaration judge_declared(const Run& run, const impl::Backend& backend, torch::ScalarType dtype) {
  Declaration d;
  d.expect = expectation_for(backend, dtype);
  if (backend.kind == impl::BackendKind::kFaulty) d.fails_in = backend.fails_in;
  auto verdict = [&](DeclaredOutcome outcome, std::string finding) {
    d.outcome = outcome, d.finding = std::move(finding);
    return d;
  };
  if (backend.kind == impl::BackendKind::kPlugin) {  // nothing is expected of it (impl/backend.h)
    d.expect = Expectation::kMayPass;
    return verdict(DeclaredOutcome::kNotRun, "its kind, plugin, declares nothing");
  }
  if (!run.error.empty()) return verdict(DeclaredOutcome::kNotAsDeclared, run.error);
  const std::vector<Category> ran = categories_run(run);
  const std::string checks = std::to_string(run.tests());
  if (d.expect == Expectation::kPass) {
    if (ran.empty()) return verdict(DeclaredOutcome::kNotRun, "no check ran");
    if (run.passed()) return verdict(DeclaredOutcome::kAsDeclared, "pass (" + checks + " checks)");
    std::string first;
    for (const Result& r : run.results) {
      if (r.status == Status::kFail) {
        first = r.test + " " + r.case_name;
        break;
      }
    }
    return verdict(DeclaredOutcome::kNotAsDeclared,
                   "FAILS " + std::to_string(run.failed_tests()) + "/" + checks + " checks, first: " + first);
  }
  std::map<Category, int> failing;  // failing results per category
  for (const Result& r : run.results) {
    if (r.status == Status::kFail && r.category) ++failing[*r.category];
  }
  std::string shown, missing, declared;
  for (Category c : d.fails_in) {
    const std::string name = category_name(c);
    declared += (declared.empty() ? "" : ", ") + name;
    if (std::find(ran.begin(), ran.end(), c) == ran.end()) continue;  // left out: not judged
    if (failing.count(c)) {
      shown += (shown.empty() ? "" : ", ") + name + " (" + std::to_string(failing[c]) + " results)";
    } else {
      missing += (missing.empty() ? "" : ", ") + name;
    }
  }
  if (shown.empty() && missing.empty()) return verdict(DeclaredOutcome::kNotRun, "declares " + declared + ": none ran");
  if (d.expect == Expectation::kMayPass) {
    return verdict(DeclaredOutcome::kAsDeclared,
                   shown.empty() ? "passes (its bug is below " + run.dtype + " resolution)" : "fails in " + shown);
  }
  if (missing.empty()) return verdict(DeclaredOutcome::kAsDeclared, "fails in " + shown);
  return verdict(DeclaredOutcome::kNotAsDeclared, "PASSES in " + missing + (shown.empty() ? "" : "; fails in " + shown));
}

}  // namespace gemma4::conformance
