#include "tools/cli/golden_report.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include "reference/error.h"
#include "tools/cli/markup.h"
#include "tools/cli/text.h"

namespace gemma4::cli {
namespace {

enum class RowStatus { kPass, kFail, kNotChecked };

RowStatus status_of(const golden::TensorCheck& c) {
  if (!c.checked) return RowStatus::kNotChecked;
  return c.pass() ? RowStatus::kPass : RowStatus::kFail;
}

const char* status_name(RowStatus s) {
  switch (s) {
    case RowStatus::kPass: return "pass";
    case RowStatus::kFail: return "fail";
    case RowStatus::kNotChecked: return "not_checked";
  }
  return "?";
}

std::ofstream open_out(const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write the report");
  return out;
}

}  // namespace

void print_verify_table(const golden::VerifyReport& report, std::ostream& out) {
  out << "  " << pad("tensor", 52) << pad("cosine", 13) << pad("max_abs", 10) << pad("base_max", 10)
            << pad("bound", 10) << pad("rms", 10) << pad("base_rms", 10) << pad("bound", 10) << "verdict\n";
  for (const golden::TensorCheck& c : report.checks) {
    out << "  " << pad(c.name, 52);
    if (!c.problem.empty()) {
      out << (c.checked ? "FAIL (" : "not checked (") << c.problem << ")\n";
      continue;
    }
    const golden::Verdict& v = c.verdict;
    const bool family = v.rule == golden::Rule::kReducedPrecision;
    std::ostringstream cosine;
    cosine << std::fixed << std::setprecision(9) << v.metrics.cosine;
    out << pad(cosine.str(), 13) << pad(sci(v.metrics.max_abs), 10) << pad(family ? sci(v.baseline.max_abs) : "-", 10)
              << pad(sci(v.max_bound), 10) << pad(sci(v.metrics.rms), 10) << pad(family ? sci(v.baseline.rms) : "-", 10)
              << pad(family ? sci(v.rms_bound) : "-", 10) << (v.pass ? "pass" : "FAIL");
    if (!v.pass && !family && v.metrics.cosine < v.cosine_min) out << " (cosine below " << v.cosine_min << ")";
    if (v.non_finite > 0) out << " (" << v.non_finite << " values not finite)";
    out << "\n";
  }
}

nlohmann::json check_json(const std::string& golden_path, const std::string& candidate_path,
                          const golden::VerifyReport& report) {
  nlohmann::json rows = nlohmann::json::array();
  for (const golden::TensorCheck& c : report.checks) {
    nlohmann::json row = {{"tensor", c.name}, {"status", status_name(status_of(c))}};
    if (!c.problem.empty()) {
      row["problem"] = c.problem;
    } else {
      const golden::Verdict& v = c.verdict;
      row.update({{"rule", golden::rule_name(v.rule)}, {"max_abs", v.metrics.max_abs}, {"rms", v.metrics.rms},
                  {"cosine", v.metrics.cosine}, {"max_bound", v.max_bound}, {"non_finite", v.non_finite}});
      if (v.rule == golden::Rule::kReducedPrecision) {
        row.update({{"baseline_max_abs", v.baseline.max_abs}, {"baseline_rms", v.baseline.rms}, {"rms_bound", v.rms_bound}});
      }
    }
    rows.push_back(row);
  }
  const int n = int(report.checks.size());
  return {{"golden", golden_path}, {"candidate", candidate_path}, {"pass", report.pass()},
          {"counts", {{"pass", n - report.failures() - report.not_checked()}, {"fail", report.failures()},
                      {"not_checked", report.not_checked()}}},
          {"rows", rows}};
}

void write_check_json(const std::string& path, const std::string& golden_path, const std::string& candidate_path,
                      const golden::VerifyReport& report) {
  open_out(path) << check_json(golden_path, candidate_path, report).dump(2) << "\n";
}

void write_check_junit(const std::string& path, const std::string& golden_path, const golden::VerifyReport& report) {
  std::ofstream out = open_out(path);
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"" << xml_escape(golden_path)
      << "\" tests=\"" << report.checks.size() << "\" failures=\"" << report.failures() << "\" skipped=\""
      << report.not_checked() << "\">\n";
  for (const golden::TensorCheck& c : report.checks) {
    out << "    <testcase classname=\"golden_check\" name=\"" << xml_escape(c.name) << "\"";
    const RowStatus s = status_of(c);
    if (s == RowStatus::kPass) {
      out << "/>\n";
      continue;
    }
    const std::string why = !c.problem.empty() ? c.problem
                                               : "max_abs " + sci(c.verdict.metrics.max_abs) + " bound " +
                                                     sci(c.verdict.max_bound) + ", rms " + sci(c.verdict.metrics.rms) +
                                                     " bound " + sci(c.verdict.rms_bound);
    out << ">\n      <" << (s == RowStatus::kFail ? "failure" : "skipped") << " message=\"" << xml_escape(why)
        << "\"/>\n    </testcase>\n";
  }
  out << "  </testsuite>\n</testsuites>\n";
}

}  // namespace gemma4::cli
