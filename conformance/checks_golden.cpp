// golden: the backend's ops and KV hand-off against the committed goldens (golden/), forward and
// backward: each file recomputed through the backend (golden::recompute: op goldens through
// run_op, model goldens, the reference's and transformers', through the whole decoder) and judged
// by the tolerance policy (golden/tolerance.h) on the file's judged positions.
#include "conformance/check.h"
#include "conformance/compare.h"
#include "conformance/tiny_models.h"
#include "golden/catalogue.h"
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

std::vector<std::string> golden_files(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (const std::string& name : files::list_directory(dir)) {
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.push_back(files::join(dir, name));
    }
  }
  return out;
}

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
  const std::string suffix = "." + golden::dtype_name(o.dtype) + ".h5";
  std::vector<Check> checks;
  for (const std::string& path : golden_files(files::join(o.golden_dir, "reference/op"), suffix)) {
    const std::string name = "op/" + path.substr(path.rfind('/') + 1, path.size() - path.rfind('/') - 1 - suffix.size());
    checks.push_back({Category::kGolden, name, [path](const SuiteOptions& o, Reporter& r) { check_golden_file(path, o, r); }});
  }
  for (const std::string& path : golden_files(files::join(o.golden_dir, "reference/model"), suffix)) {
    const std::string name = "model/" + path.substr(path.rfind('/') + 1, path.size() - path.rfind('/') - 1 - suffix.size());
    checks.push_back({Category::kGolden, name, [path](const SuiteOptions& o, Reporter& r) { check_golden_file(path, o, r); }});
  }
  const std::string transformers = files::join(o.golden_dir, "transformers");
  for (const std::string& name : files::list_directory(transformers)) {
    const std::string path = files::join(files::join(transformers, name), "golden" + suffix);
    if (!files::is_file(path)) continue;
    checks.push_back({Category::kGolden, "transformers/" + name,
                      [path](const SuiteOptions& o, Reporter& r) { check_golden_file(path, o, r); }});
  }
  return checks;
}

}  // namespace gemma4::conformance
