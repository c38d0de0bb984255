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

// A row with no bound: a missing tensor, a bitwise comparison.
Result unbounded_row(const std::string& case_name, const std::string& metric, double value, bool pass,
                     const std::string& detail) {
  Result r;
  r.case_name = case_name;
  r.status = pass ? Status::kPass : Status::kFail;
  r.metric = metric;
  r.value = value;
  r.detail = detail;
  return r;
}

}  // namespace

void RunComparison::add(const std::string& name, const torch::Tensor& candidate, const torch::Tensor& reference,
                        const torch::Tensor& truth, const torch::Tensor& judged) {
  if (!candidate.defined()) {
    rows_.push_back(unbounded_row(name, "", 0, false, "missing from the candidate run"));
    return;
  }
  const bool gradient = name.rfind("grads/", 0) == 0;
  if (bitwise_) {
    const bool pass = at::equal(candidate, reference);
    double error = golden::measure(candidate, reference).max_abs;
    if (!pass && error == 0) error = std::numeric_limits<double>::quiet_NaN();  // NaN somewhere
    if (!gradient || !pass) {
      rows_.push_back(unbounded_row(name, "max_abs", error, pass, pass ? "bitwise equal" : "not bitwise equal"));
    }
    grads_ += gradient;
    failed_ += gradient && !pass;
    return;
  }
  if (dtype_ != torch::kFloat32 && !truth.defined()) throw Error("no fp32 truth for " + name + " (needed in " +
                                                                   c10::toString(dtype_) + ")");
  const golden::Verdict v = judge_run(candidate, reference, dtype_ == torch::kFloat32 ? reference : truth, judged, dtype_);
  if (!gradient) {
    rows_.push_back(verdict_result(name, v));
    return;
  }
  ++grads_;
  if (!v.pass && ++failed_ <= 8) rows_.push_back(verdict_result(name, v));
  if (v.ratio() > worst_ratio_) worst_ratio_ = v.ratio(), worst_ = v, worst_name_ = name;
}

std::vector<Result> RunComparison::rows() const {
  std::vector<Result> rows = rows_;
  if (grads_ == 0) return rows;
  if (bitwise_) {
    rows.push_back(unbounded_row("grads/*", "differing_tensors", failed_, failed_ == 0,
                                 std::to_string(grads_) + " gradients, " + std::to_string(failed_) +
                                     " not bitwise equal"));
    return rows;
  }
  // The worst gradient, as one row whose verdict is the whole set's.
  golden::Verdict worst = worst_;
  worst.pass = failed_ == 0;
  rows.push_back(verdict_result("grads/* (worst of " + std::to_string(grads_) + ": " + worst_name_ +
                                    (failed_ ? ", " + std::to_string(failed_) + " failing" : "") + ")",
                                worst));
  return rows;
}

std::vector<Result> compare_runs(const golden::TensorMap& candidate, const golden::TensorMap& reference,
                                 const golden::TensorMap& truth, const golden::TensorMap& judged, torch::ScalarType dtype,
                                 bool bitwise) {
  RunComparison comparison(dtype, bitwise);
  for (const auto& [name, ref] : reference) {
    const auto c = candidate.find(name);
    const auto t = truth.find(name);
    const auto mask = judged.find(name);
    comparison.add(name, c == candidate.end() ? torch::Tensor() : c->second, ref,
                   t == truth.end() ? torch::Tensor() : t->second, mask == judged.end() ? torch::Tensor() : mask->second);
  }
  return comparison.rows();
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
    // A quantized KV cache's error is e4m3's, not rounding: it is judged (checks_decode.cpp), never a baseline.
    if (b.kv_cache.quantization != KvQuantization::kNone) continue;
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
