#include "conformance/suite.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
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
bool g_print_rows = true;

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s + " ";
}

std::string sci(double v) {
  std::ostringstream s;
  s << std::scientific << std::setprecision(2) << v;
  return s.str();
}

// ggml's test-backend-ops style: check, case, metric, bound, verdict.
void print_row(const Result& r) {
  if (!g_print_rows) return;
  const char* verdict = r.status == "pass" ? "OK" : r.status == "fail" ? "FAIL" : "not supported";
  std::cout << "  " << pad(r.test, 52) << pad(r.case_name, 44);
  if (r.status == "not_supported") {
    std::cout << verdict << " (" << r.detail << ")\n";
    return;
  }
  if (!r.metric.empty()) std::cout << pad(r.metric + "=" + sci(r.value), 24) << pad("bound=" + sci(r.bound), 16);
  std::cout << verdict;
  if (!r.detail.empty()) std::cout << "  " << r.detail;
  std::cout << "\n";
}

void add(Result r) {
  print_row(r);
  recorded().push_back(std::move(r));
}

class CheckTest : public ::testing::Test {
 public:
  CheckTest(const Check* check, const SuiteOptions* options) : check_(check), options_(options) {}
  void TestBody() override {
    const size_t before = recorded().size();
    Reporter reporter(check_->category + "/" + check_->name, check_->category);
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
  for (auto make : {golden_checks, op_sweep_checks, finite_grads_checks, multithreaded_recompute_checks, key_conventions_checks,
                    memory_flatness_checks, determinism_checks, bad_input_checks}) {
    for (Check& c : make(o)) all.push_back(std::move(c));
  }
  return all;
}

}  // namespace

void Reporter::record(const std::string& case_name, const std::string& metric, double value, double bound, bool pass,
                      const std::string& detail) {
  add({test_, category_, case_name, pass ? "pass" : "fail", metric, value, bound, detail});
  if (!pass) ADD_FAILURE() << case_name << ": " << metric << " " << value << " > bound " << bound << " " << detail;
}

void Reporter::fail(const std::string& case_name, const std::string& detail) {
  add({test_, category_, case_name, "fail", "", 0, 0, detail});
  ADD_FAILURE() << case_name << ": " << detail;
}

void Reporter::not_supported(const std::string& reason) {
  add({test_, category_, "", "not_supported", "", 0, 0, reason});
  GTEST_SKIP() << reason;
}

RunReport run_suite(const SuiteOptions& options, const RunOptions& run) {
  static bool ran = false;
  if (ran) throw Error("run_suite runs once per process");
  ran = true;
  g_print_rows = run.print_rows;

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
    if (std::regex_search(c.category + "/" + c.name, filter)) checks.push_back(std::move(c));
  }
  if (checks.empty()) throw Error("no check matches --filter '" + run.filter + "'");
  for (const Check& c : checks) {
    const Check* check = &c;
    ::testing::RegisterTest(c.category.c_str(), c.name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
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
  std::map<std::string, std::map<std::string, int>> by_category;
  for (const Result& r : report.results) ++by_category[r.category][r.status];
  out << "\nsummary by category (results: pass / fail / not supported):\n";
  for (const std::string& c : categories()) {
    if (!by_category.count(c)) continue;
    auto& n = by_category[c];
    out << "  " << pad(c, 26) << n["pass"] << " / " << n["fail"] << " / " << n["not_supported"] << "\n";
  }
  out << (report.passed() ? "PASS" : "FAIL") << ": " << report.tests - report.failed_tests << "/" << report.tests
      << " checks passed\n";
}

void write_json_report(const RunReport& report, const SuiteOptions& options, const std::string& path) {
  nlohmann::json results = nlohmann::json::array();
  for (const Result& r : report.results) {
    results.push_back({{"test", r.test},
                       {"category", r.category},
                       {"case", r.case_name},
                       {"status", r.status},
                       {"metric", r.metric},
                       {"value", r.value},
                       {"bound", r.bound},
                       {"detail", r.detail}});
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
