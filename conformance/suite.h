#pragma once
// Runs the conformance suite for one backend, device and dtype: registers every check as a
// GoogleTest test, runs them, and gathers the results (conformance/check.h).
#include <ostream>
#include <string>
#include <vector>

#include "conformance/check.h"

namespace gemma4::conformance {

// Which results print as they are recorded (the JSON report always has every one).
enum class RowPrinting {
  kFailures,  // the failing rows only: what a user must read
  kAll,       // every row, passing and not supported too (--verbose)
};

struct RunOptions {
  std::string filter;      // ECMAScript regex matched against "<category>/<name>"; empty: all
  std::string junit_path;  // GoogleTest's XML (JUnit) report, when set
  RowPrinting rows = RowPrinting::kFailures;
  bool progress = false;   // a "[i/N] check" line on stderr, rewritten in place (for a terminal)
};

struct RunReport {
  std::vector<Result> results;
  int tests = 0;
  int failed_tests = 0;
  bool passed() const { return failed_tests == 0 && tests > 0; }
};

// Runs once per process (GoogleTest's RUN_ALL_TESTS).
RunReport run_suite(const SuiteOptions& options, const RunOptions& run);

void print_summary(const RunReport& report, std::ostream& out);
void write_json_report(const RunReport& report, const SuiteOptions& options, const std::string& path);

}  // namespace gemma4::conformance
