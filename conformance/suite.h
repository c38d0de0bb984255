#pragma once
// The suite's runner: every check of the one table (categories.cpp) whose "<category>/<name>"
// matches a filter, run in this process for one backend, device and dtype, into one Run of the
// report (report.h). It may run any number of times in a process, for any number of backends: a
// check's exception or a check that records nothing becomes a failing row, never a crash of the
// runner. (GoogleTest stays for the unit tests; it no longer drives the suite.)
#include <ostream>
#include <regex>
#include <string>
#include <vector>

#include "conformance/check.h"

namespace gemma4::conformance {

struct RunOptions {
  std::string filter;            // ECMAScript regex matched against "<category>/<name>"; empty: all
  bool all_rows = false;         // print every row as it is recorded, not only the failing ones
  bool progress = false;         // a "[i/N] check" line on stderr, rewritten in place (for a terminal)
  std::ostream* out = nullptr;   // where rows print as they are recorded; null: nowhere
};

// The regex an option gives (empty: everything). Throws gemma4::Error naming --option when it is not one.
std::regex option_regex(const std::string& option, const std::string& text);

// The checks of the table whose "<category>/<name>" matches `filter`. Throws gemma4::Error when the
// filter is not a regular expression or matches nothing.
std::vector<Check> select_checks(const SuiteOptions& options, const std::string& filter);

Run run_suite(const SuiteOptions& options, const RunOptions& run);

}  // namespace gemma4::conformance
