#pragma once
// One check of the conformance suite, and how it reports. The runner (suite.h) runs each check for
// the chosen backend, device and dtype; a check records one or more result rows (report.h): a
// metric, its bound and a verdict, or "not supported".
#include <torch/types.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "conformance/report.h"
#include "golden/golden_file.h"
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

// Given to a check's body; turns what it measures into result rows of the report (report.h).
class Reporter {
 public:
  using Sink = std::function<void(Result)>;
  using MeasurementSink = std::function<void(Measurement)>;
  Reporter(std::string test, Category category, Sink sink, MeasurementSink measurements = {})
      : test_(std::move(test)), category_(category), sink_(std::move(sink)), measurements_(std::move(measurements)) {}
  void record(const std::string& case_name, const std::string& metric, double value, double bound, bool pass,
              const std::string& detail = "");
  // A tensor judged by the tolerance policy: its deciding metric, both errors, cosine and NMSE.
  void record(const std::string& case_name, const golden::Verdict& verdict);
  // A result made elsewhere (compare_runs, verdict_result); its test and category become this check's.
  void record(Result result);
  // A failure that is not a measurement (an exception, a missing output).
  void fail(const std::string& case_name, const std::string& detail);
  // A figure reported beside the verdicts, never judged (report.h, Run::measurements), named
  // "<test>/<name>".
  void measure(const std::string& name, double value, const std::string& detail);
  // Marks the whole test not supported; the check returns right after.
  void not_supported(const std::string& reason);
  int recorded() const { return recorded_; }

 private:
  std::string test_;
  Category category_;
  Sink sink_;
  MeasurementSink measurements_;
  int recorded_ = 0;
};

// A tensor judged by the tolerance policy as a result row (test and category left empty): the
// deciding metric (max_abs or rms), both errors, cosine and NMSE in the detail.
Result verdict_result(const std::string& case_name, const golden::Verdict& verdict);

// A result that does not depend on the candidate (a truth, a baseline-family member's run) for one
// check in the options' dtype and device: computed once per process and kept, so that judging many
// backends in one process (calibrate, conform --backend all) computes it once, not once per
// backend. `key` names everything else the result depends on (the check, the case, the member).
template <typename T>
const T& shared_result(const std::string& key, const SuiteOptions& options, const std::function<T()>& compute) {
  static std::mutex mutex;
  static std::map<std::string, T> results;
  const std::string full_key = key + "|" + c10::toString(options.dtype) + "|" + options.device.str();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = results.find(full_key);
  if (it == results.end()) it = results.emplace(full_key, compute()).first;
  return it->second;
}

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
std::vector<Check> real_size_checks(const SuiteOptions& options);

// One golden file recomputed through the backend and judged (checks_golden.cpp): what golden and
// real_size do with each file.
void check_golden_file(const std::string& path, const SuiteOptions& options, Reporter& reporter);
// The same for a golden already read.
void check_golden_case(const golden::GoldenCase& golden, const SuiteOptions& options, Reporter& reporter);
// One decode golden (golden/FORMAT.md, "Decode goldens") teacher-forced through the backend's
// layer and cache ops, plainly or as speculative drafts (checks_decode.cpp): the scores, and the
// prompt caches where the file has them, judged by the family rule.
void check_decode_golden(const std::string& path, bool speculative, const SuiteOptions& options, Reporter& reporter);

}  // namespace gemma4::conformance
