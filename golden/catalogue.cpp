#include "golden/catalogue.h"

#include <ATen/ATen.h>

#include "golden/model_cases.h"
#include "golden/op_cases.h"
#include "reference/error.h"

namespace gemma4::golden {
namespace {

using torch::Tensor;

TensorMap to_cpu(const TensorMap& tensors) {
  TensorMap out;
  for (const auto& [name, t] : tensors) out[name] = t.detach().to(torch::kCPU);
  return out;
}

std::string strip_prefix(const std::string& name, const std::string& prefix) {
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : std::string();
}

template <typename Case>
const Case& find_case(const std::vector<Case>& cases, const std::string& name, const std::string& full_name) {
  for (const Case& c : cases) {
    if (c.name == name) return c;
  }
  throw Error("unknown golden case '" + full_name + "' (gemma4-conform golden list prints them)");
}

// `compute` runs the case in a dtype from inputs already in that dtype. For reduced precision the
// truth is the same computation in float32 on the rounded values.
template <typename Compute>
void fill_expected_and_truth(GoldenCase& g, torch::ScalarType dtype, Compute compute) {
  g.expected = to_cpu(compute(dtype));
  if (dtype != torch::kFloat32) g.truth = to_cpu(compute(torch::kFloat32));
}

GoldenCase generate_op(const OpCase& oc, const GenerateOptions& o) {
  GoldenCase g;
  g.kind = "op";
  g.description = oc.summary;
  g.config = oc.params;
  g.config["op"] = oc.op;
  const OpTensors t = make_op_tensors(oc, o.seed, o.dtype, o.device);
  g.inputs = to_cpu(t.inputs);
  g.upstream = to_cpu(t.upstream);
  g.judged = op_judged(oc.op, oc.params, g.inputs);
  fill_expected_and_truth(g, o.dtype, [&](torch::ScalarType dtype) {
    const OpResult r = run_op(oc.op, oc.params, to_device(t.inputs, dtype, o.device), to_device(t.upstream, dtype, o.device));
    TensorMap out;
    for (const auto& [name, x] : r.outputs) out["outputs/" + name] = x;
    for (const auto& [name, x] : r.grads) out["grads/" + name] = x;
    return out;
  });
  return g;
}

GoldenCase generate_model(const ModelCase& mc, const GenerateOptions& o) {
  GoldenCase g;
  g.kind = "model";
  g.description = mc.summary;
  g.config = tiny_config(mc, o.configs_dir);
  g.weights_mode = WeightsMode::kStored;
  g.kv_key = "layer-type";
  const Config config = parse_config(g.config);
  const ModelWeights rounded = random_weights(config, o.seed, o.dtype, o.device);
  g.weights = to_cpu(weights_to_map(config, rounded));
  g.inputs = make_model_inputs(config, 2, 12, o.seed);
  fill_expected_and_truth(g, o.dtype, [&](torch::ScalarType dtype) {
    return run_model(config, weights_from_map(config, g.weights, dtype, o.device), to_device(g.inputs, dtype, o.device));
  });
  g.judged = model_judged(g.inputs, g.expected, config.pad_token_id);
  return g;
}

GoldenCase generate_layer(const LayerCase& lc, const GenerateOptions& o) {
  GoldenCase g;
  g.kind = "layer";
  g.description = lc.summary;
  g.config = load_released_config(lc.released_config, o.configs_dir);
  g.weights_mode = WeightsMode::kGenerated;
  const Config config = parse_config(g.config);
  g.layer = first_layer_of_type(config, lc.type);
  g.inputs = to_cpu(to_device(make_layer_inputs(config, lc.seq_len, o.seed, false), o.dtype, o.device));
  g.upstream = to_cpu(to_device(make_layer_inputs(config, lc.seq_len, o.seed, true), o.dtype, o.device));
  const int l = static_cast<int>(g.layer);
  // Generated in fp32 once, rounded to the case dtype; the truth widens the rounded values.
  const LayerWeights rounded = random_layer_weights(config, l, o.seed, o.dtype, o.device);
  fill_expected_and_truth(g, o.dtype, [&](torch::ScalarType dtype) {
    LayerWeights cast = rounded;
    for (WeightSlot& slot : layer_weight_slots(config, l, cast)) *slot.tensor = slot.tensor->to(dtype);
    return run_layer(config, l, cast, to_device(g.inputs, dtype, o.device), to_device(g.upstream, dtype, o.device));
  });
  return g;
}

// The parts every case shares: its name, dtype, seed, provenance and the baseline family.
GoldenCase finish(GoldenCase g, const std::string& name, const GenerateOptions& o) {
  g.name = name;
  g.dtype = dtype_name(o.dtype);
  g.seed = o.seed;
  g.provenance = current_provenance(o.generator, o.device);
  attach_baseline(g, o.family, o.device);
  return g;
}

}  // namespace

std::vector<CatalogueEntry> catalogue() {
  std::vector<CatalogueEntry> out;
  for (const OpCase& c : op_cases()) out.push_back({"op/" + c.name, "op", c.summary, true});
  for (const ModelCase& c : model_cases()) out.push_back({"model/" + c.name, "model", c.summary, true});
  for (const LayerCase& c : layer_cases()) {
    out.push_back({"real/" + c.name, "layer", c.summary + ", S = " + std::to_string(c.seq_len), false});
  }
  return out;
}

GoldenCase generate_op_case(const OpCase& op_case, const GenerateOptions& o) {
  return finish(generate_op(op_case, o), "op/" + op_case.name, o);
}

GoldenCase generate_case(const std::string& name, const GenerateOptions& o) {
  GoldenCase g;
  if (const std::string op = strip_prefix(name, "op/"); !op.empty()) {
    const OpCase* oc = find_op_case(op);
    if (!oc) throw Error("unknown golden case '" + name + "' (gemma4-conform golden list prints them)");
    g = generate_op(*oc, o);
  } else if (const std::string model = strip_prefix(name, "model/"); !model.empty()) {
    g = generate_model(find_case(model_cases(), model, name), o);
  } else if (const std::string layer = strip_prefix(name, "real/"); !layer.empty()) {
    g = generate_layer(find_case(layer_cases(), layer, name), o);
  } else {
    throw Error("unknown golden case '" + name + "' (gemma4-conform golden list prints them)");
  }
  return finish(std::move(g), name, o);
}

ModelWeights model_weights(const GoldenCase& g, torch::ScalarType dtype, const torch::Device& device) {
  const Config config = parse_config(g.config);
  switch (g.weights_mode) {
    case WeightsMode::kStored: return weights_from_map(config, g.weights, dtype, device);
    case WeightsMode::kCheckpoint: return checkpoint_weights(g.checkpoint, config, dtype, device);
    case WeightsMode::kGenerated:
    case WeightsMode::kConstructed: break;
  }
  // Real-size cases (golden/real/) store no weights: the counter generator or the construction
  // recreates them.
  return seeded_weights(g.weights_mode, config, g.seed, dtype, device);
}

TensorMap recompute(const GoldenCase& g, const torch::Device& device, const ForwardOptions& backend) {
  const torch::ScalarType dtype = dtype_from_name(g.dtype);
  const LayerOps& ops = backend.ops ? *backend.ops : reference_layer_ops();
  TensorMap got;
  if (g.kind == "op") {
    if (!g.config.contains("op") || !g.config["op"].is_string()) throw Error("op case without an 'op' in its config");
    const OpResult r = run_op(g.config["op"].get<std::string>(), g.config, to_device(g.inputs, dtype, device),
                              to_device(g.upstream, dtype, device), ops);
    for (const auto& [name, x] : r.outputs) got["outputs/" + name] = x;
    for (const auto& [name, x] : r.grads) got["grads/" + name] = x;
  } else if (g.kind == "model") {
    const Config config = parse_config(g.config);
    ForwardOptions options = backend;
    options.kv_key = parse_kv_key_convention(g.kv_key);
    got = run_model(config, model_weights(g, dtype, device), to_device(g.inputs, dtype, device), options);
  } else {
    const Config config = parse_config(g.config);
    const int l = static_cast<int>(g.layer);
    if (l < 0 || l >= config.num_hidden_layers) throw Error("layer " + std::to_string(l) + " is not in the config");
    LayerWeights w;
    if (g.weights_mode == WeightsMode::kConstructed || g.weights_mode == WeightsMode::kCheckpoint) {
      throw Error(std::string("layer cases have stored or generated weights, not ") + weights_mode_name(g.weights_mode));
    } else if (g.weights_mode == WeightsMode::kGenerated) {
      w = random_layer_weights(config, l, g.seed, dtype, device);
    } else {
      for (WeightSlot& slot : layer_weight_slots(config, l, w)) *slot.tensor = g.weights.at(slot.name).to(device, dtype);
    }
    got = run_layer(config, l, w, to_device(g.inputs, dtype, device), to_device(g.upstream, dtype, device), ops);
  }
  return got;
}

std::string golden_file_name(const std::string& case_name, torch::ScalarType dtype) {
  return case_name + "." + dtype_name(dtype) + ".h5";
}

}  // namespace gemma4::golden
