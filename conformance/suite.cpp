#include "conformance/suite.h"

#include <chrono>
#include <iomanip>
#include <iostream>
#include <regex>
#include <sstream>

#include "conformance/compare.h"
#include "golden/golden_file.h"
#include "reference/error.h"
#include "reference/text.h"

namespace gemma4::conformance {
namespace {

using text::sci;

std::string test_name(const Check& c) { return std::string(category_name(c.category)) + "/" + c.name; }

Result row(const std::string& case_name, Status status, const std::string& detail) {
  Result r;
  r.case_name = case_name, r.status = status, r.detail = detail;
  return r;
}

}  // namespace

void Reporter::record(const std::string& case_name, const std::string& metric, double value, double bound, bool pass,
                      const std::string& detail) {
  Result r = row(case_name, pass ? Status::kPass : Status::kFail, detail);
  r.metric = metric, r.value = value, r.bound = bound;
  record(std::move(r));
}

void Reporter::record(const std::string& case_name, const golden::Verdict& v) { record(verdict_result(case_name, v)); }

void Reporter::record(Result r) {
  r.test = test_, r.category = category_;
  ++recorded_;
  sink_(std::move(r));
}

void Reporter::fail(const std::string& case_name, const std::string& detail) {
  record(row(case_name, Status::kFail, detail));
}

void Reporter::measure(const std::string& name, double value, const std::string& detail) {
  if (measurements_) measurements_({test_ + "/" + name, value, detail});
}

void Reporter::not_supported(const std::string& reason) {
  record(row("", Status::kNotSupported, reason));
}

Result verdict_result(const std::string& case_name, const golden::Verdict& v) {
  const bool rms = v.rms_decides();
  Result r = row(case_name, v.pass ? Status::kPass : Status::kFail, "");
  r.category = Category::kGolden, r.metric = rms ? "rms" : "max_abs", r.value = v.error(), r.bound = v.bound();
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

std::regex option_regex(const std::string& option, const std::string& text) {
  try {
    return std::regex(text.empty() ? ".*" : text);
  } catch (const std::regex_error& e) {
    throw Error("--" + option + " '" + text + "' is not a regular expression: " + e.what());
  }
}

std::vector<Check> select_checks(const SuiteOptions& options, const std::string& filter_text) {
  const std::regex filter = option_regex("filter", filter_text);
  std::vector<Check> out;
  for (const CategoryInfo& category : categories()) {
    for (Check& c : category.checks(options)) {
      if (std::regex_search(test_name(c), filter)) out.push_back(std::move(c));
    }
  }
  if (out.empty()) throw Error("no check matches --filter '" + filter_text + "'");
  return out;
}

Run run_suite(const SuiteOptions& options, const RunOptions& run_options) {
  const auto start = std::chrono::steady_clock::now();
  Run run;
  run.subject = options.backend.name;
  run.device = options.device.is_cuda() ? "cuda" : "cpu";
  run.dtype = golden::dtype_name(options.dtype);
  const std::vector<Check> checks = select_checks(options, run_options.filter);
  auto sink = [&](Result r) {
    if (run_options.out && (run_options.all_rows || r.status == Status::kFail)) {
      if (run_options.progress) std::cerr << "\r\033[K" << std::flush;  // the row replaces the progress line
      print_row(*run_options.out, r);
    }
    run.results.push_back(std::move(r));
  };
  for (size_t i = 0; i < checks.size(); ++i) {
    const Check& check = checks[i];
    if (run_options.progress) {
      std::cerr << "\r\033[K  [" << i + 1 << "/" << checks.size() << "] " << test_name(check) << std::flush;
    }
    Reporter reporter(test_name(check), check.category, sink,
                      [&](Measurement m) { run.measurements.push_back(std::move(m)); });
    try {
      check.run(options, reporter);
    } catch (const std::exception&) {
      reporter.fail("", error_message(std::current_exception()));
    }
    if (reporter.recorded() == 0) reporter.fail("", "the check recorded no result");
  }
  if (run_options.progress) std::cerr << "\r\033[K" << std::flush;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace gemma4::conformance
