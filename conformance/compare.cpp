#include "conformance/compare.h"

#include <ATen/ATen.h>

#include <iomanip>
#include <limits>
#include <sstream>

#include "golden/model_cases.h"
#include "golden/tolerance.h"

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
  return training_step(c, w32, inputs, forward);
}

void record_comparison(Reporter& r, const std::string& label, const golden::TensorMap& candidate,
                       const golden::TensorMap& reference, const golden::TensorMap& truth, torch::ScalarType dtype,
                       bool bitwise) {
  int grads = 0, failed = 0;
  double worst_error = 0, worst_bound = 0, worst_ratio = -1;
  std::string worst_name;
  for (const auto& [name, ref] : reference) {
    auto it = candidate.find(name);
    if (it == candidate.end()) {
      r.fail(label + name, "missing from the candidate run");
      continue;
    }
    double error, bound;
    bool pass;
    std::ostringstream detail;
    if (bitwise) {
      pass = at::equal(it->second, ref);
      error = golden::measure(it->second, ref).max_abs;
      bound = 0;
      if (!pass && error == 0) error = std::numeric_limits<double>::quiet_NaN();  // NaN somewhere
      detail << (pass ? "bitwise equal" : "not bitwise equal");
    } else {
      const golden::Role role = golden::role_of(name);
      const golden::Verdict v = dtype == torch::kFloat32
                                    ? golden::check_fp32(it->second, ref, role)
                                    : golden::check_reduced_precision(it->second, ref, truth.at(name), dtype, role);
      error = v.error, bound = v.bound, pass = v.pass;
      detail << "cosine " << std::setprecision(7) << v.metrics.cosine;
    }
    if (name.rfind("grads/", 0) != 0) {
      r.record(label + name, "max_abs", error, bound, pass, detail.str());
      continue;
    }
    ++grads;
    if (!pass && ++failed <= 8) r.record(label + name, "max_abs", error, bound, false, detail.str());
    const double ratio = bound > 0 ? error / bound : (error > 0 || !pass ? 1e300 : 0);
    if (ratio > worst_ratio) worst_ratio = ratio, worst_error = error, worst_bound = bound, worst_name = name;
  }
  if (grads == 0) return;
  std::string detail = "worst of " + std::to_string(grads) + ": " + worst_name;
  if (failed) detail += "; " + std::to_string(failed) + " failing";
  r.record(label + "grads/*", "max_abs", worst_error, worst_bound, failed == 0, detail);
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
