// gemma4-conform golden check GOLDEN CANDIDATE: judge outputs computed elsewhere (any language,
// any framework) against a golden, under the policy `golden verify` applies to the reference.
#include <iostream>

#include "golden/candidate.h"
#include "golden/golden_file.h"
#include "reference/error.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"
#include "tools/cli/golden_report.h"
#include "tools/cli/golden_subcommands.h"

namespace gemma4::cli {

int golden_check_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      {"forward-only", "", "the candidate holds outputs only: grads/ rows are reported 'not checked'"},
      {"envelope", "FLOAT.h5", "a quantized golden's float model (golden/FORMAT.md, \"Quantized subjects\"): also report\n"
                               "KLD, top-1 agreement and dp against its logits, by position (never judged)"},
      {"quiet", "", "print only the rows that failed, and the summary"},
      {"report", "FILE.json", "write every row (status, both errors, bounds) as JSON (conformance/report.h)"},
      {"junit", "FILE.xml", "write a JUnit XML report, one test case per row"},
  };
  Args args;
  if (!args.parse("golden check GOLDEN CANDIDATE.h5",
                  "Judge a candidate file, outputs computed by your implementation from the golden's inputs/ and\n"
                  "weights/ in the golden's dtype, against the golden under the tolerance policy (golden/FORMAT.md,\n"
                  "\"Candidate files\"): datasets named as the golden's expected/ (outputs/..., grads/...) at the\n"
                  "candidate's root. outputs/logits is required (for op and layer goldens, every output), and so are\n"
                  "outputs/loss and every grads/... unless --forward-only. Intermediates (hidden states, attention\n"
                  "outputs, shared K/V) may be left out: 'not checked'. Unknown, integer, mis-shaped and non-finite\n"
                  "datasets fail. Exit 0 when nothing failed, 1 otherwise or when a file cannot be read.",
                  options, argv)) {
    return 0;
  }
  if (args.positional().size() != 2) throw UsageError{"name a golden file and a candidate file"};
  const std::string golden_path = args.positional()[0], candidate_path = args.positional()[1];
  const golden::GoldenCase g = golden::read_untrusted_golden(golden_path);
  const golden::TensorMap candidate = golden::read_candidate(candidate_path);
  const golden::VerifyReport report = golden::check_candidate(
      g, candidate, args.has("forward-only") ? golden::CandidateScope::kForwardOnly
                                             : golden::CandidateScope::kForwardAndBackward);
  if (args.has("quiet")) {
    golden::VerifyReport failed;
    for (const golden::TensorCheck& c : report.checks) {
      if (c.failed()) failed.checks.push_back(c);
    }
    if (!failed.checks.empty()) print_verify_table(failed);
  } else {
    print_verify_table(report);
  }
  // The report's run: the candidate judged against the golden, in the golden's dtype.
  const conformance::Report out{"golden check", {check_run(candidate_path + " against " + golden_path, g, report, candidate,
                                                          args.has("envelope") ? args.get("envelope") : "", &std::cout)}};
  if (args.has("report")) conformance::write_json(args.get("report"), conformance::to_json(out));
  if (args.has("junit")) conformance::write_junit(args.get("junit"), out);
  int passed = 0, failed = 0, skipped = 0;
  for (const conformance::Result& row : out.runs[0].results) {
    (row.status == conformance::Status::kPass ? passed : row.status == conformance::Status::kFail ? failed : skipped)++;
  }
  std::cout << (failed == 0 ? "PASS " : "FAIL ") << candidate_path << " against " << golden_path << " (case " << g.name
            << ", " << g.dtype << "): " << passed << " pass, " << failed << " fail, " << skipped << " not checked\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace gemma4::cli
