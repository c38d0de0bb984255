// determinism: the same inputs twice give bitwise-equal logits, loss and gradients, for backends
// that claim it (Capabilities::deterministic); the others are reported not_supported.
#include <ATen/ATen.h>

#include "conformance/check.h"
#include "conformance/tiny_models.h"
#include "golden/model_cases.h"

namespace gemma4::conformance {

std::vector<Check> determinism_checks(const SuiteOptions&) {
  std::vector<Check> checks;
  for (const std::string& name : tiny_model_names()) {
    checks.push_back({"determinism", "twice/" + name, [name](const SuiteOptions& o, Reporter& reporter) {
                        if (!o.backend.capabilities.deterministic) return reporter.not_supported("not claimed by the backend");
                        const TinyModel m = tiny_model(name, o);
                        const std::string why = unsupported(o, m.config);
                        if (!why.empty()) return reporter.not_supported(why);
                        const ForwardOptions f = backend_forward(o, m.config);
                        const golden::TensorMap a = golden::run_model(m.config, m.weights, m.inputs, f);
                        const golden::TensorMap b = golden::run_model(m.config, m.weights, m.inputs, f);
                        int differing = 0;
                        std::string first;
                        for (const auto& [dataset, t] : a) {
                          if (at::equal(t, b.at(dataset))) continue;
                          if (differing++ == 0) first = dataset;
                        }
                        reporter.record(std::to_string(a.size()) + " tensors", "differing_tensors", differing, 0,
                                        differing == 0, differing ? "first: " + first : "bitwise equal");
                      }});
  }
  return checks;
}

}  // namespace gemma4::conformance
