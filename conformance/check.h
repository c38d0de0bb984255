#pragma once
// One check of the conformance suite, and how it reports. Each check runs as a GoogleTest test
// (registered at run time for the chosen backend, device and dtype) and records one or more
// results: a metric, its bound and a verdict, or "not supported".
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "impl/backend.h"

namespace gemma4::conformance {

struct SuiteOptions {
  impl::Backend backend;
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kFloat32;
  int steps = 0;            // memory_flatness steps; 0: the default (50 on CPU, 200 on CUDA)
  std::string golden_dir;   // the committed goldens (golden/ of the source tree)
};

// The categories every result carries.
inline const std::vector<std::string>& categories() {
  static const std::vector<std::string> all = {"golden",          "op_sweep",        "finite_grads", "multithreaded_recompute",
                                               "key_conventions", "memory_flatness", "determinism",  "bad_input"};
  return all;
}

struct Result {
  std::string test;      // "golden/op/rms_norm-scale"
  std::string category;
  std::string case_name; // what was measured inside the test ("outputs/y", "layers.1.self_attn.k_proj.weight")
  std::string status;    // pass | fail | not_supported
  std::string metric;    // what the value is ("max_abs", "slope_bytes_per_step", "error")
  double value = 0;
  double bound = 0;
  std::string detail;    // cosine/NMSE, an error message, or why not supported
};

// Given to a check's body; records results and turns failures into GoogleTest failures.
class Reporter {
 public:
  Reporter(std::string test, std::string category) : test_(std::move(test)), category_(std::move(category)) {}
  void record(const std::string& case_name, const std::string& metric, double value, double bound, bool pass,
              const std::string& detail = "");
  // A failure that is not a measurement (an exception, a missing output).
  void fail(const std::string& case_name, const std::string& detail);
  // Marks the whole test not_supported (GoogleTest: skipped).
  void not_supported(const std::string& reason);

 private:
  std::string test_, category_;
};

struct Check {
  std::string category;
  std::string name;  // unique within the category; the test is "<category>/<name>"
  std::function<void(const SuiteOptions&, Reporter&)> run;
};

// The checks of each category (conformance/checks_*.cpp).
std::vector<Check> golden_checks(const SuiteOptions& options);
std::vector<Check> op_sweep_checks(const SuiteOptions& options);
std::vector<Check> finite_grads_checks(const SuiteOptions& options);
std::vector<Check> multithreaded_recompute_checks(const SuiteOptions& options);
std::vector<Check> key_conventions_checks(const SuiteOptions& options);
std::vector<Check> memory_flatness_checks(const SuiteOptions& options);
std::vector<Check> determinism_checks(const SuiteOptions& options);
std::vector<Check> bad_input_checks(const SuiteOptions& options);

}  // namespace gemma4::conformance
