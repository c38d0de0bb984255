#include "conformance/compare.h"

#include <ATen/ATen.h>

#include <limits>

#include "golden/model_cases.h"
#include "reference/error.h"

namespace gemma4::conformance {

golden::TensorMap training_step(const Config& c, const ModelWeights& w, const golden::TensorMap& inputs,
                                const ForwardOptions& forward) {
  golden::TensorMap out;
  for (auto& [name, t] : golden::run_model(c, w, inputs, forward)) {
    if (name == "outputs/loss" || name == "outputs/logits" || name.rfind("grads/", 0) == 0) out[name] = t;
  }
  return out;
}

golden::TensorMap fp32_training_step(const Config& c, const ModelWeights& w, const golden::TensorMap& inputs,
                                     const ForwardOptions& forward) {
  const ModelWeights w32 =
      golden::weights_from_map(c, golden::weights_to_map(c, w), torch::kFloat32, w.embed_tokens.device());
  // The truth is the reference's ops in fp32: a backend need not support fp32 (the cuda one does not).
  ForwardOptions reference = forward;
  reference.ops = nullptr;
  return training_step(c, w32, inputs, reference);
}

namespace {

golden::Verdict judge_run(const torch::Tensor& candidate, const torch::Tensor& reference, const torch::Tensor& truth,
                          const torch::Tensor& judged, torch::ScalarType dtype) {
  if (dtype == torch::kFloat32) return golden::check_fp32(candidate, reference, judged);
  const golden::Metrics own = golden::measure(reference, truth, judged);
  const golden::BaselineError baseline{own.max_abs, own.rms, "plain run", "plain run"};
  return golden::check_reduced_precision(candidate, truth, baseline, dtype, judged);
}

}  // namespace

std::vector<Result> compare_runs(const golden::TensorMap& candidate, const golden::TensorMap& reference,
                                 const golden::TensorMap& truth, const golden::TensorMap& judged, torch::ScalarType dtype,
                                 bool bitwise) {
  std::vector<Result> rows;
  auto row = [&rows](const std::string& name, const std::string& metric, double value, double bound, bool pass,
                     const std::string& detail) {
    Result r{"", Category::kGolden, name, pass ? Status::kPass : Status::kFail, metric, value, bound};
    r.detail = detail;
    rows.push_back(r);
  };
  int grads = 0, failed = 0;
  double worst_ratio = -1;
  golden::Verdict worst;
  std::string worst_name;
  for (const auto& [name, ref] : reference) {
    auto it = candidate.find(name);
    if (it == candidate.end()) {
      row(name, "", 0, 0, false, "missing from the candidate run");
      continue;
    }
    const bool gradient = name.rfind("grads/", 0) == 0;
    if (bitwise) {
      const bool pass = at::equal(it->second, ref);
      double error = golden::measure(it->second, ref).max_abs;
      if (!pass && error == 0) error = std::numeric_limits<double>::quiet_NaN();  // NaN somewhere
      if (!gradient || !pass) row(name, "max_abs", error, 0, pass, pass ? "bitwise equal" : "not bitwise equal");
      grads += gradient;
      failed += gradient && !pass;
      continue;
    }
    const auto mask = judged.find(name);
    const golden::Verdict v = judge_run(it->second, ref, dtype == torch::kFloat32 ? ref : truth.at(name),
                                        mask == judged.end() ? torch::Tensor() : mask->second, dtype);
    if (!gradient) {
      rows.push_back(verdict_result(name, v));
      continue;
    }
    ++grads;
    if (!v.pass && ++failed <= 8) rows.push_back(verdict_result(name, v));
    if (v.ratio() > worst_ratio) worst_ratio = v.ratio(), worst = v, worst_name = name;
  }
  if (grads == 0 || bitwise) {
    if (bitwise && grads > 0) {
      row("grads/*", "differing_tensors", failed, 0, failed == 0,
          std::to_string(grads) + " gradients, " + std::to_string(failed) + " not bitwise equal");
    }
    return rows;
  }
  // The worst gradient, as one row whose verdict is the whole set's.
  worst.pass = failed == 0;
  rows.push_back(verdict_result("grads/* (worst of " + std::to_string(grads) + ": " + worst_name +
                                    (failed ? ", " + std::to_string(failed) + " failing" : "") + ")",
                                worst));
  return rows;
}

void record_comparison(Reporter& r, const std::string& label, const golden::TensorMap& candidate,
                       const golden::TensorMap& reference, const golden::TensorMap& truth, const golden::TensorMap& judged,
                       torch::ScalarType dtype, bool bitwise) {
  for (Result row : compare_runs(candidate, reference, truth, judged, dtype, bitwise)) {
    row.case_name = label + row.case_name;
    r.record(std::move(row));
  }
}

void report(const golden::VerifyReport& verdicts, Reporter& reporter) {
  for (const golden::TensorCheck& c : verdicts.checks) {
    if (!c.problem.empty()) {
      reporter.fail(c.name, c.problem);
      continue;
    }
    reporter.record(c.name, c.verdict);
  }
}

std::vector<golden::FamilyMember> baseline_family(const torch::Device& device, torch::ScalarType dtype) {
  std::vector<golden::FamilyMember> family;
  for (const impl::Backend& b : impl::builtin_backends()) {
    if (b.kind != impl::BackendKind::kVariant || !b.capabilities.unsupported(device, dtype).empty()) continue;
    ForwardOptions forward;
    forward.ops = &b.ops;  // builtin_backends() lives for the whole process
    if (b.kv_handoff) forward.kv_handoff = &b.kv_handoff;
    family.push_back({b.name, forward, b.kv_cache.make ? &b.kv_cache : nullptr});
  }
  return family;
}

golden::Verdict family_verdict(const torch::Tensor& candidate, const torch::Tensor& truth, const Members& family,
                               const torch::Tensor& judged, torch::ScalarType dtype) {
  if (dtype == torch::kFloat32) return golden::check_fp32(candidate, truth, judged);
  golden::BaselineError b;
  for (const auto& [name, result] : family) {
    const golden::Metrics m = golden::measure(result, truth, judged);
    if (m.max_abs >= b.max_abs) b.max_abs = m.max_abs, b.max_abs_by = name;
    if (m.rms >= b.rms) b.rms = m.rms, b.rms_by = name;
  }
  return golden::check_reduced_precision(candidate, truth, b, dtype, judged);
}

std::string error_message(const std::exception_ptr& error) {
  std::string s;
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    s = e.what_without_backtrace();
  } catch (const std::exception& e) {
    s = e.what();
  } catch (...) {
    s = "unknown exception";
  }
  return s.substr(0, s.find('\n'));
}

}  // namespace gemma4::conformance
