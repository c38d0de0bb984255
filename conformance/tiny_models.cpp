#include "conformance/tiny_models.h"

#include "golden/model_cases.h"
#include "reference/error.h"

namespace gemma4::conformance {

std::vector<std::string> tiny_model_names() {
  std::vector<std::string> names;
  for (const golden::ModelCase& mc : golden::model_cases()) names.push_back(mc.name);
  return names;
}

TinyModel tiny_model(const std::string& name, const SuiteOptions& o, uint64_t seed) {
  for (const golden::ModelCase& mc : golden::model_cases()) {
    if (mc.name != name) continue;
    TinyModel m{name, parse_config(golden::tiny_config(mc, golden::released_configs_dir())), {}, {}};
    m.weights = random_weights(m.config, seed, o.dtype, o.device);
    m.inputs = golden::make_model_inputs(m.config, 2, 12, seed);
    return m;
  }
  throw Error("no tiny model '" + name + "'");
}

ForwardOptions backend_ops(const SuiteOptions& o) {
  ForwardOptions f;
  f.ops = &o.backend.ops;
  if (o.backend.kv_handoff) f.kv_handoff = &o.backend.kv_handoff;
  return f;
}

ForwardOptions backend_forward(const SuiteOptions& o, const Config& config, bool checkpoint) {
  ForwardOptions f = backend_ops(o);
  if (checkpoint) f.checkpoint_layers.assign(config.num_hidden_layers, true);
  return f;
}

std::string unsupported(const SuiteOptions& o, const Config& config) {
  for (const LayerSpec& spec : config.layers) {
    const int64_t window = spec.type == LayerType::kSliding ? config.sliding_window : 0;
    const std::string why = o.backend.capabilities.unsupported(o.device, o.dtype, spec.head_dim, window);
    if (!why.empty()) return why;
  }
  return o.backend.capabilities.unsupported(o.device, o.dtype);
}

}  // namespace gemma4::conformance
