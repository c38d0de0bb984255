#include "tools/cli/golden_report.h"

#include <iostream>

#include "conformance/check.h"
#include "reference/text.h"

namespace gemma4::cli {

using text::pad;
using text::sci;

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

conformance::Run golden_run(const std::string& subject, const std::string& dtype, const golden::VerifyReport& report) {
  conformance::Run run;
  run.subject = subject;
  run.dtype = dtype;
  for (const golden::TensorCheck& c : report.checks) {
    conformance::Result row;
    if (c.problem.empty()) {
      row = conformance::verdict_result("", c.verdict);
    } else {
      row.status = c.checked ? conformance::Status::kFail : conformance::Status::kNotSupported;
      row.detail = c.checked ? c.problem : "not checked: " + c.problem;
    }
    row.test = c.name;
    row.category = conformance::Category::kGolden;
    run.results.push_back(row);
  }
  return run;
}

}  // namespace gemma4::cli
