// golden: the backend's ops and KV hand-off against the committed goldens (golden/), forward and
// backward, judged by the tolerance policy (golden/tolerance.h): op goldens through run_op, model
// goldens (the reference's and transformers') through the whole decoder.
#include <iomanip>
#include <sstream>

#include "conformance/check.h"
#include "conformance/tiny_models.h"
#include "golden/model_cases.h"
#include "golden/op_cases.h"
#include "golden/verify.h"
#include "reference/files.h"

namespace gemma4::conformance {
namespace {

// Golden files of one dtype in `dir` ("<case>.<dtype>.h5"), sorted.
std::vector<std::string> golden_files(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (const std::string& name : files::list_directory(dir)) {
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.push_back(files::join(dir, name));
    }
  }
  return out;
}

void report(const golden::VerifyReport& verdicts, Reporter& reporter) {
  for (const golden::TensorCheck& c : verdicts.checks) {
    if (!c.problem.empty()) {
      reporter.fail(c.name, c.problem);
      continue;
    }
    std::ostringstream detail;
    detail << "cosine " << std::setprecision(7) << c.verdict.metrics.cosine << ", nmse " << std::setprecision(3)
           << c.verdict.metrics.nmse;
    reporter.record(c.name, "max_abs", c.verdict.error, c.verdict.bound, c.verdict.pass, detail.str());
  }
}

void check_op_golden(const std::string& path, const SuiteOptions& o, Reporter& reporter) {
  const golden::GoldenCase g = golden::read_golden(path);
  const bool sliding = g.config.value("layer_type", std::string()) == "sliding_attention";
  const std::string why = o.backend.capabilities.unsupported(o.device, o.dtype, g.config.value("head_dim", int64_t{0}),
                                                             sliding ? g.config.value("sliding_window", int64_t{0}) : 0);
  if (!why.empty()) return reporter.not_supported(why);
  const torch::ScalarType dtype = golden::dtype_from_name(g.dtype);
  auto to_device = [&](const golden::TensorMap& m) {
    golden::TensorMap out;
    for (const auto& [name, t] : m) out[name] = t.is_floating_point() ? t.to(o.device, dtype) : t.to(o.device);
    return out;
  };
  const golden::OpResult r =
      golden::run_op(g.config.at("op").get<std::string>(), g.config, to_device(g.inputs), to_device(g.upstream), o.backend.ops);
  golden::TensorMap candidate;
  for (const auto& [name, t] : r.outputs) candidate["outputs/" + name] = t;
  for (const auto& [name, t] : r.grads) candidate["grads/" + name] = t;
  report(golden::judge(g, candidate), reporter);
}

void check_model_golden(const std::string& path, const SuiteOptions& o, Reporter& reporter) {
  const golden::GoldenCase g = golden::read_golden(path);
  const Config config = parse_config(g.config);
  const std::string why = unsupported(o, config);
  if (!why.empty()) return reporter.not_supported(why);
  ForwardOptions forward = backend_forward(o, config);
  forward.kv_key = parse_kv_key_convention(g.kv_key);
  const ModelWeights weights = golden::weights_from_map(config, g.weights, golden::dtype_from_name(g.dtype), o.device);
  report(golden::judge(g, golden::run_model(config, weights, g.inputs, forward)), reporter);
}

}  // namespace

std::vector<Check> golden_checks(const SuiteOptions& o) {
  const std::string suffix = "." + golden::dtype_name(o.dtype) + ".h5";
  std::vector<Check> checks;
  for (const std::string& path : golden_files(files::join(o.golden_dir, "reference/op"), suffix)) {
    const std::string name = "op/" + path.substr(path.rfind('/') + 1, path.size() - path.rfind('/') - 1 - suffix.size());
    checks.push_back({"golden", name, [path](const SuiteOptions& o, Reporter& r) { check_op_golden(path, o, r); }});
  }
  for (const std::string& path : golden_files(files::join(o.golden_dir, "reference/model"), suffix)) {
    const std::string name = "model/" + path.substr(path.rfind('/') + 1, path.size() - path.rfind('/') - 1 - suffix.size());
    checks.push_back({"golden", name, [path](const SuiteOptions& o, Reporter& r) { check_model_golden(path, o, r); }});
  }
  const std::string transformers = files::join(o.golden_dir, "transformers");
  for (const std::string& name : files::list_directory(transformers)) {
    const std::string path = files::join(files::join(transformers, name), "golden" + suffix);
    if (!files::is_file(path)) continue;
    checks.push_back({"golden", "transformers/" + name,
                      [path](const SuiteOptions& o, Reporter& r) { check_model_golden(path, o, r); }});
  }
  return checks;
}

}  // namespace gemma4::conformance
