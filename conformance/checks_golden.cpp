// golden: the backend's ops and KV hand-off against the committed goldens (golden/), forward and
// backward: each file recomputed through the backend (golden::recompute: op goldens through
// run_op, model goldens, the reference's and transformers', through the whole decoder) and judged
// by the tolerance policy (golden/tolerance.h) on the file's judged positions.
#include "conformance/check.h"
#include "conformance/compare.h"
#include "conformance/tiny_models.h"
#include "golden/catalogue.h"
#include "golden/data_dir.h"
#include "golden/verify.h"
#include "reference/files.h"

namespace gemma4::conformance {
namespace {


// What the backend must support to recompute `g`: an op case names its head dim and window in
// its parameters, a model case in its config.
std::string unsupported_by(const golden::GoldenCase& g, const SuiteOptions& o) {
  if (g.kind != "op") return unsupported(o, parse_config(g.config));
  const bool sliding = g.config.value("layer_type", std::string()) == "sliding_attention";
  return o.backend.capabilities.unsupported(o.device, o.dtype, g.config.value("head_dim", int64_t{0}),
                                            sliding ? g.config.value("sliding_window", int64_t{0}) : 0);
}

}  // namespace

void check_golden_file(const std::string& path, const SuiteOptions& o, Reporter& reporter) {
  check_golden_case(golden::read_golden(path), o, reporter);
}

void check_golden_case(const golden::GoldenCase& g, const SuiteOptions& o, Reporter& reporter) {
  const std::string why = unsupported_by(g, o);
  if (!why.empty()) return reporter.not_supported(why);
  // A candidate that is itself a member of the file's baseline family is judged without itself.
  report(golden::judge(g, golden::recompute(g, o.device, backend_ops(o)), o.backend.name), reporter);
}

std::vector<Check> golden_checks(const SuiteOptions& o) {
  std::vector<Check> checks;
  for (const golden::CommittedGolden& g : golden::committed_goldens(o.golden_dir, golden::dtype_name(o.dtype))) {
    const std::string path = g.path;
    checks.push_back({Category::kGolden, g.name, [path](const SuiteOptions& o, Reporter& r) { check_golden_file(path, o, r); }});
  }
  return checks;
}

}  // namespace gemma4::conformance
