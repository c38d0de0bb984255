// finite_grads: one training step of each tiny model through the backend (activation
// checkpointing on, so the KV hand-off crosses checkpoint boundaries). Every trainable parameter
// gets a finite gradient, and every parameter whose reference gradient is non-zero gets a
// non-zero one: in particular a storing layer's k_proj, which also receives gradient through the
// KV-shared layers that borrow its K/V (GEMMA4.md, KV sharing).
#include <ATen/ATen.h>

#include "conformance/check.h"
#include "conformance/tiny_models.h"
#include "golden/model_cases.h"

namespace gemma4::conformance {
namespace {

void check_finite_grads(const std::string& name, const SuiteOptions& o, Reporter& reporter) {
  const TinyModel m = tiny_model(name, o);
  const std::string why = unsupported(o, m.config);
  if (!why.empty()) return reporter.not_supported(why);
  const golden::TensorMap reference = golden::run_model(m.config, m.weights, m.inputs);
  const golden::TensorMap got = golden::run_model(m.config, m.weights, m.inputs, backend_forward(o, m.config, true));
  int params = 0, non_finite = 0, missing = 0;
  for (const auto& [dataset, ref] : reference) {
    if (dataset.rfind("grads/", 0) != 0) continue;
    ++params;
    const torch::Tensor& grad = got.at(dataset);
    const bool finite = at::isfinite(grad).all().item<bool>();
    const bool must_move = ref.abs().max().item<double>() > 0;
    const bool moved = grad.abs().max().item<double>() > 0;
    if (!finite) ++non_finite;
    if (must_move && !moved) ++missing;
    // One row per storing layer's k_proj: the gradient that must also arrive through the borrowers.
    bool storing_k_proj = false;
    for (int l = 0; l < m.config.num_hidden_layers; ++l) {
      storing_k_proj |= m.config.layers[l].stores_kv && dataset == "grads/layers." + std::to_string(l) + ".self_attn.k_proj.weight";
    }
    if (storing_k_proj || !finite || (must_move && !moved)) {
      reporter.record(dataset, "max_abs_grad", grad.abs().max().item<double>(), 0, finite && (moved || !must_move),
                      !finite ? "not finite" : (must_move && !moved) ? "zero, the reference's is not" : "finite, non-zero");
    }
  }
  reporter.record("all " + std::to_string(params) + " parameters", "bad_grads", non_finite + missing, 0,
                  non_finite + missing == 0,
                  std::to_string(non_finite) + " not finite, " + std::to_string(missing) + " zero where the reference's is not");
}

}  // namespace

std::vector<Check> finite_grads_checks(const SuiteOptions&) {
  std::vector<Check> checks;
  for (const std::string& name : tiny_model_names()) {
    checks.push_back({Category::kFiniteGrads, "checkpointed/" + name,
                      [name](const SuiteOptions& o, Reporter& r) { check_finite_grads(name, o, r); }});
  }
  return checks;
}

}  // namespace gemma4::conformance
