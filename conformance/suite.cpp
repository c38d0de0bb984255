#include "conformance/suite.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <regex>

#include "conformance/compare.h"
#include "reference/error.h"

namespace gemma4::conformance {
namespace {

// The results of this process's run: tests run one after another, on the main thread.
std::vector<Result>& recorded() {
  static std::vector<Result> results;
  return results;
}
// This run's printing (run_suite sets them; one run per process).
RowPrinting g_rows = RowPrinting::kFailures;
bool g_progress = false;

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s + " ";
}

std::string sci(double v) {
  std::ostringstream s;
  s << std::scientific << std::setprecision(2) << v;
  return s.str();
}

// ggml's test-backend-ops style: check, case, metric, the baseline's error where there is one,
// bound, verdict. Both errors print before the verdict, as FlashAttention's tests do.
void print_row(const Result& r) {
  if (g_rows == RowPrinting::kFailures && r.status != Status::kFail) return;
  if (g_progress) std::cerr << "\r\033[K" << std::flush;  // the row replaces the progress line
  const char* verdict = r.status == Status::kPass ? "OK" : r.status == Status::kFail ? "FAIL" : "not supported";
  std::cout << "  " << pad(r.test, 52) << pad(r.case_name, 44);
  if (r.status == Status::kNotSupported) {
    std::cout << verdict << " (" << r.detail << ")\n";
    return;
  }
  if (!r.metric.empty()) {
    std::cout << pad(r.metric + "=" + sci(r.value), 18) << pad(std::isnan(r.baseline) ? "" : "baseline=" + sci(r.baseline), 19)
              << pad("bound=" + sci(r.bound), 16);
  }
  std::cout << verdict;
  if (!r.detail.empty()) std::cout << "  " << r.detail;
  std::cout << "\n";
}

// "[12/81] golden/model/e2b" on stderr, rewritten in place while the suite runs.
class ProgressLine : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& info) override {
    const int total = ::testing::UnitTest::GetInstance()->test_to_run_count();
    std::cerr << "\r\033[K  [" << ++started_ << "/" << total << "] " << info.test_suite_name() << "/" << info.name()
              << std::flush;
  }
  void OnTestProgramEnd(const ::testing::UnitTest&) override { std::cerr << "\r\033[K" << std::flush; }
  int started_ = 0;
};

void add(Result r) {
  print_row(r);
  recorded().push_back(std::move(r));
}

class CheckTest : public ::testing::Test {
 public:
  CheckTest(const Check* check, const SuiteOptions* options) : check_(check), options_(options) {}
  void TestBody() override {
    const size_t before = recorded().size();
    Reporter reporter(std::string(category_name(check_->category)) + "/" + check_->name, check_->category);
    try {
      check_->run(*options_, reporter);
    } catch (const std::exception&) {
      reporter.fail("", error_message(std::current_exception()));
    }
    if (recorded().size() == before && !IsSkipped()) reporter.fail("", "the check recorded no result");
  }

 private:
  const Check* check_;
  const SuiteOptions* options_;
};

std::vector<Check> all_checks(const SuiteOptions& o) {
  std::vector<Check> all;
  for (const CategoryInfo& category : categories()) {
    for (Check& c : category.checks(o)) all.push_back(std::move(c));
  }
  return all;
}

}  // namespace

double Result::ratio() const {
  if (std::isnan(value)) return std::numeric_limits<double>::infinity();
  return bound > 0 ? value / bound : (value > 0 ? std::numeric_limits<double>::infinity() : 0.0);
}

void Reporter::record(const std::string& case_name, const std::string& metric, double value, double bound, bool pass,
                      const std::string& detail) {
  Result r{test_, category_, case_name, pass ? Status::kPass : Status::kFail, metric, value, bound};
  r.detail = detail;
  record(std::move(r));
}

void Reporter::record(const std::string& case_name, const golden::Verdict& v) { record(verdict_result(case_name, v)); }

void Reporter::record(Result r) {
  r.test = test_, r.category = category_;
  add(r);
  if (r.status == Status::kFail) {
    ADD_FAILURE() << r.case_name << ": " << r.metric << " " << r.value << " > bound " << r.bound << " " << r.detail;
  }
}

Result verdict_result(const std::string& case_name, const golden::Verdict& v) {
  const bool rms = v.rms_decides();
  Result r{"", Category::kGolden, case_name, v.pass ? Status::kPass : Status::kFail, rms ? "rms" : "max_abs", v.error(),
           v.bound()};
  if (v.rule == golden::Rule::kReducedPrecision) r.baseline = rms ? v.baseline.rms : v.baseline.max_abs;
  std::ostringstream detail;
  detail << "cosine " << std::setprecision(7) << v.metrics.cosine << ", nmse " << std::setprecision(3) << v.metrics.nmse;
  if (v.rule == golden::Rule::kReducedPrecision) {
    detail << "; max " << sci(v.metrics.max_abs) << "/" << sci(v.max_bound) << ", rms " << sci(v.metrics.rms) << "/"
           << sci(v.rms_bound) << "; " << v.baseline_error_text();
  }
  if (v.non_finite > 0) detail << "; " << v.non_finite << " values not finite";
  r.detail = detail.str();
  return r;
}

void Reporter::fail(const std::string& case_name, const std::string& detail) {
  Result r{test_, category_, case_name, Status::kFail};
  r.detail = detail;
  add(r);
  ADD_FAILURE() << case_name << ": " << detail;
}

void Reporter::not_supported(const std::string& reason) {
  Result r{test_, category_, "", Status::kNotSupported};
  r.detail = reason;
  add(r);
  GTEST_SKIP() << reason;
}

RunReport run_suite(const SuiteOptions& options, const RunOptions& run) {
  static bool ran = false;
  if (ran) throw Error("run_suite runs once per process");
  ran = true;
  g_rows = run.rows;
  g_progress = run.progress;

  std::regex filter;
  try {
    filter = std::regex(run.filter.empty() ? ".*" : run.filter);
  } catch (const std::regex_error& e) {
    throw Error("--filter '" + run.filter + "' is not a regular expression: " + e.what());
  }
  // The checks and options must outlive RUN_ALL_TESTS: static storage for this one run.
  static std::vector<Check> checks;
  static SuiteOptions suite_options;
  suite_options = options;
  for (Check& c : all_checks(suite_options)) {
    if (std::regex_search(std::string(category_name(c.category)) + "/" + c.name, filter)) checks.push_back(std::move(c));
  }
  if (checks.empty()) throw Error("no check matches --filter '" + run.filter + "'");
  for (const Check& c : checks) {
    const Check* check = &c;
    ::testing::RegisterTest(category_name(c.category), c.name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [check]() -> ::testing::Test* { return new CheckTest(check, &suite_options); });
  }

  if (!run.junit_path.empty()) GTEST_FLAG_SET(output, "xml:" + run.junit_path);
  int argc = 1;
  char name[] = "gemma4-conform";
  char* argv[] = {name, nullptr};
  ::testing::InitGoogleTest(&argc, argv);
  // Our table replaces GoogleTest's own printer.
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  if (run.progress) listeners.Append(new ProgressLine());
  const int gtest_status = RUN_ALL_TESTS();  // the report below carries the verdict
  (void)gtest_status;

  RunReport report;
  report.results = recorded();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  report.tests = unit.test_to_run_count();
  report.failed_tests = unit.failed_test_count();
  return report;
}

void print_summary(const RunReport& report, std::ostream& out) {
  std::map<Category, std::map<Status, int>> by_category;
  for (const Result& r : report.results) ++by_category[r.category][r.status];
  out << "\nsummary by category (results: pass / fail / not supported):\n";
  for (const CategoryInfo& c : categories()) {
    if (!by_category.count(c.category)) continue;
    auto& n = by_category[c.category];
    out << "  " << pad(c.name, 26) << n[Status::kPass] << " / " << n[Status::kFail] << " / " << n[Status::kNotSupported]
        << "\n";
  }
  out << (report.passed() ? "PASS" : "FAIL") << ": " << report.tests - report.failed_tests << "/" << report.tests
      << " checks passed\n";
}

void write_json_report(const RunReport& report, const SuiteOptions& options, const std::string& path) {
  nlohmann::json results = nlohmann::json::array();
  for (const Result& r : report.results) {
    nlohmann::json row = {{"test", r.test},          {"category", category_name(r.category)},
                          {"case", r.case_name},      {"status", status_name(r.status)},
                          {"metric", r.metric},       {"value", r.value},
                          {"bound", r.bound},         {"detail", r.detail}};
    // Both errors in the report too: the candidate's (value) and the baseline family's.
    if (!std::isnan(r.baseline)) row["baseline"] = r.baseline;
    results.push_back(row);
  }
  const nlohmann::json j = {{"backend", options.backend.name},
                            {"device", options.device.is_cuda() ? "cuda" : "cpu"},
                            {"dtype", c10::toString(options.dtype)},
                            {"checks", report.tests},
                            {"failed_checks", report.failed_tests},
                            {"passed", report.passed()},
                            {"results", results}};
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write the JSON report");
  out << j.dump(2) << "\n";
}

}  // namespace gemma4::conformance
