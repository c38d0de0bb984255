#pragma once
// One check of the conformance suite, and how it reports. Each check runs as a GoogleTest test
// (registered at run time for the chosen backend, device and dtype) and records one or more
// results: a metric, its bound and a verdict, or "not supported".
#include <torch/types.h>

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "golden/tolerance.h"
#include "impl/backend.h"

namespace gemma4::conformance {

struct SuiteOptions {
  impl::Backend backend;
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kFloat32;
  int steps = 0;            // memory_flatness steps; 0: the default (50 on CPU, 200 on CUDA)
  std::string golden_dir;   // the committed goldens (golden/ of the source tree)
};

using impl::Category;

enum class Status { kPass, kFail, kNotSupported };
const char* status_name(Status status);  // "pass", "fail", "not_supported"

struct Result {
  std::string test;      // "golden/op/rms_norm-scale"
  Category category = Category::kGolden;
  std::string case_name; // what was measured inside the test ("outputs/y", "layers.1.self_attn.k_proj.weight")
  Status status = Status::kPass;
  std::string metric;    // what the value is ("max_abs", "rms", "slope_bytes_per_step", "error")
  double value = 0;
  double bound = 0;
  // Judged against the baseline family (bf16/f16): that family's error in the same metric, so that
  // every row shows both errors, the candidate's and the baseline's. NaN when there is none.
  double baseline = std::numeric_limits<double>::quiet_NaN();
  std::string detail;    // cosine/NMSE, an error message, or why not supported
  // How close the value came to its bound: value / bound (infinity past a zero bound).
  double ratio() const;
};

// Given to a check's body; records results and turns failures into GoogleTest failures.
class Reporter {
 public:
  Reporter(std::string test, Category category) : test_(std::move(test)), category_(category) {}
  void record(const std::string& case_name, const std::string& metric, double value, double bound, bool pass,
              const std::string& detail = "");
  // A tensor judged by the tolerance policy: its deciding metric, both errors, cosine and NMSE.
  void record(const std::string& case_name, const golden::Verdict& verdict);
  // A result made elsewhere (compare_runs, verdict_result); its test and category become this check's.
  void record(Result result);
  // A failure that is not a measurement (an exception, a missing output).
  void fail(const std::string& case_name, const std::string& detail);
  // Marks the whole test not_supported (GoogleTest: skipped).
  void not_supported(const std::string& reason);

 private:
  std::string test_;
  Category category_;
};

// A tensor judged by the tolerance policy as a result row (test and category left empty): the
// deciding metric (max_abs or rms), both errors, cosine and NMSE in the detail.
Result verdict_result(const std::string& case_name, const golden::Verdict& verdict);

struct Check {
  Category category;
  std::string name;  // unique within the category; the test is "<category>/<name>"
  std::function<void(const SuiteOptions&, Reporter&)> run;
};

// The suite's one table of categories (conformance/categories.cpp): each category's name and checks.
struct CategoryInfo {
  Category category;
  const char* name;  // "golden", "op_sweep", ... as in a check's name "<category>/<check>"
  std::vector<Check> (*checks)(const SuiteOptions& options);
};
const std::vector<CategoryInfo>& categories();  // in the order the suite runs and reports them
const char* category_name(Category category);
std::optional<Category> parse_category(const std::string& name);

// The checks of each category (conformance/checks_*.cpp).
std::vector<Check> golden_checks(const SuiteOptions& options);
std::vector<Check> op_sweep_checks(const SuiteOptions& options);
std::vector<Check> finite_grads_checks(const SuiteOptions& options);
std::vector<Check> multithreaded_recompute_checks(const SuiteOptions& options);
std::vector<Check> key_conventions_checks(const SuiteOptions& options);
std::vector<Check> memory_flatness_checks(const SuiteOptions& options);
std::vector<Check> determinism_checks(const SuiteOptions& options);
std::vector<Check> bad_input_checks(const SuiteOptions& options);
std::vector<Check> decode_checks(const SuiteOptions& options);
std::vector<Check> decode_kernel_checks();  // decode/kernel/*, part of decode_checks

}  // namespace gemma4::conformance
