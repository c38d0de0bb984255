// key_conventions: what changed across transformers versions must not change the model (GEMMA4.md,
// "Conventions that changed"; "Known failure modes": keying the store by a convention the
// installed transformers no longer sets).
//  - rendezvous/<released config>: for both KV key conventions (source layer index, <= 5.5; layer
//    type, >= 5.8) every key a KV-shared layer reads was written by an earlier storing layer
//    (check_kv_rendezvous on the full released config), and the config's tiny version run through
//    the backend's ops and hand-off under each convention gives identical loss, logits and
//    gradients.
//  - serializations/<config>: the two serializations of the global-layer geometry (top-level
//    global_head_dim / num_global_key_value_heads, and per_layer_config) written from the same
//    config parse to identical Configs (every resolved LayerSpec), and identical model outputs.
//  - weight-layouts/<case>: both checkpoint key layouts load: Gemma4ForConditionalGeneration
//    ("model.language_model.*", sharded: golden/transformers/e2b_like) and Gemma4ForCausalLM
//    ("model.*": dense_keqv).
// Bounds: the two runs of a pair differ only in a string key or in how the same geometry was
// written, so they execute the same ops on the same tensors: a deterministic backend
// (Capabilities::deterministic) must give bitwise-equal results (bound 0). A backend that does not
// claim determinism is held to the tolerance policy instead (golden/tolerance.h: check_fp32 in
// fp32; in bf16/f16 the FlashAttention rule with the layer-type run as the baseline and its fp32
// run as the truth).
#include <ATen/ATen.h>
#include <torch/types.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "conformance/check.h"
#include "conformance/compare.h"
#include "conformance/tiny_models.h"
#include "golden/model_cases.h"
#include "reference/error.h"
#include "reference/files.h"
#include "reference/hf_checkpoint.h"

namespace gemma4::conformance {
namespace {

using golden::TensorMap;
using nlohmann::json;

const KvKeyConvention kConventions[] = {KvKeyConvention::kLayerIndex, KvKeyConvention::kLayerType};

std::vector<std::string> released_configs() {
  std::vector<std::string> out;
  const std::string dir = golden::released_configs_dir();
  if (!files::is_directory(dir)) return out;
  for (const std::string& name : files::list_directory(dir)) {
    if (name.rfind("gemma-4-", 0) == 0 && name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) {
      out.push_back(name);
    }
  }
  return out;
}

// The tiny version of a released config: its golden model case, else the config cut to 6 layers.
json tiny_json(const std::string& file) {
  for (const golden::ModelCase& mc : golden::model_cases()) {
    if (mc.released_config == file) return golden::tiny_config(mc, golden::released_configs_dir());
  }
  const json full = golden::load_released_config(file, golden::released_configs_dir());
  const int64_t shared = full.value("num_kv_shared_layers", 0) > 0 ? 2 : 0;
  return golden::tiny_config({file, "", file, 6, shared}, golden::released_configs_dir());
}

// One training step through the backend's ops and hand-off under `convention`, and (only for a
// backend that is not deterministic, in bf16/f16) its fp32 truth.
TensorMap run(const SuiteOptions& o, const Config& c, const ModelWeights& w, const TensorMap& inputs,
              KvKeyConvention convention) {
  ForwardOptions f = backend_forward(o, c);
  f.kv_key = convention;
  return training_step(c, w, inputs, f);
}

TensorMap truth_if_needed(const SuiteOptions& o, const Config& c, const ModelWeights& w, const TensorMap& inputs,
                          KvKeyConvention convention) {
  if (o.backend.capabilities.deterministic || o.dtype == torch::kFloat32) return {};
  ForwardOptions f = backend_forward(o, c);
  f.kv_key = convention;
  return fp32_training_step(c, w, inputs, f);
}

// Records whether `b` equals `a` (see the top of the file).
void compare_runs(const SuiteOptions& o, Reporter& r, const std::string& label, const TensorMap& b, const TensorMap& a,
                  const TensorMap& truth, const TensorMap& inputs) {
  record_comparison(r, label, b, a, truth, golden::model_judged(inputs, a), o.dtype,
                    /*bitwise=*/o.backend.capabilities.deterministic);
}

void check_rendezvous(const std::string& file, const SuiteOptions& o, Reporter& r) {
  const Config full = parse_config(golden::load_released_config(file, golden::released_configs_dir()));
  int shared = 0;
  for (const LayerSpec& s : full.layers) shared += s.kv_shared;
  for (KvKeyConvention convention : kConventions) {
    const std::string name = std::string(kv_key_convention_name(convention)) + "/rendezvous";
    try {
      check_kv_rendezvous(full, convention);
      r.record(name, "missed_reads", 0, 0, true,
               std::to_string(shared) + " KV-shared layers of " + std::to_string(full.num_hidden_layers) +
                   " find their key");
    } catch (const std::exception&) {
      r.fail(name, error_message(std::current_exception()));
    }
  }

  const Config tiny = parse_config(tiny_json(file));
  const std::string why = unsupported(o, tiny);
  if (!why.empty()) return r.not_supported(why);
  const ModelWeights w = random_weights(tiny, 11, o.dtype, o.device);
  const TensorMap inputs = golden::make_model_inputs(tiny, 2, 12, 11);
  TensorMap runs[2];
  for (int i = 0; i < 2; ++i) {
    try {
      runs[i] = run(o, tiny, w, inputs, kConventions[i]);
    } catch (const std::exception&) {
      r.fail(std::string("tiny/") + kv_key_convention_name(kConventions[i]), error_message(std::current_exception()));
    }
  }
  if (runs[0].empty() || runs[1].empty()) return;
  compare_runs(o, r, "tiny/layer-index vs layer-type: ", runs[0], runs[1],
               truth_if_needed(o, tiny, w, inputs, KvKeyConvention::kLayerType), inputs);
}

// --- serializations -------------------------------------------------------------------------

json unwrap(const json& j) { return j.contains("text_config") ? j.at("text_config") : j; }

// The same config with the global-layer geometry written the >= 5.8 way: per_layer_config for the
// full layers, no top-level global fields.
json per_layer_form(const json& j) {
  const Config c = parse_config(j);
  json out = j;
  out.erase("global_head_dim");
  out.erase("num_global_key_value_heads");
  json per_layer = json::object();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_types[l] != LayerType::kFull) continue;
    per_layer[std::to_string(l)] = {{"head_dim", c.layers[l].head_dim}, {"num_key_value_heads", c.layers[l].num_kv_heads}};
  }
  out["per_layer_config"] = per_layer;
  return out;
}

// ... and the <= 5.5 way: top-level global_head_dim and num_global_key_value_heads (the latter
// only means something with attention_k_eq_v), no per_layer_config.
json global_form(const json& j) {
  const Config c = parse_config(j);
  json out = j;
  out.erase("per_layer_config");
  out["num_global_key_value_heads"] = nullptr;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_types[l] != LayerType::kFull) continue;
    out["global_head_dim"] = c.layers[l].head_dim;
    if (c.attention_k_eq_v) out["num_global_key_value_heads"] = c.layers[l].num_kv_heads;
    break;
  }
  return out;
}

// Every resolved field that differs between a and b ("layer 3 head_dim 512 vs 256").
std::vector<std::string> config_differences(const Config& a, const Config& b) {
  std::vector<std::string> d;
  auto field = [&](const char* name, auto x, auto y) {
    if (x != y) {
      std::ostringstream s;
      s << name << " " << x << " vs " << y;
      d.push_back(s.str());
    }
  };
  field("vocab_size", a.vocab_size, b.vocab_size);
  field("hidden_size", a.hidden_size, b.hidden_size);
  field("intermediate_size", a.intermediate_size, b.intermediate_size);
  field("num_hidden_layers", a.num_hidden_layers, b.num_hidden_layers);
  field("num_attention_heads", a.num_attention_heads, b.num_attention_heads);
  field("num_key_value_heads", a.num_key_value_heads, b.num_key_value_heads);
  field("head_dim", a.head_dim, b.head_dim);
  field("sliding_window", a.sliding_window, b.sliding_window);
  field("num_kv_shared_layers", a.num_kv_shared_layers, b.num_kv_shared_layers);
  field("attention_k_eq_v", a.attention_k_eq_v, b.attention_k_eq_v);
  field("use_double_wide_mlp", a.use_double_wide_mlp, b.use_double_wide_mlp);
  field("hidden_size_per_layer_input", a.hidden_size_per_layer_input, b.hidden_size_per_layer_input);
  field("enable_moe_block", a.enable_moe_block, b.enable_moe_block);
  if (a.layers.size() != b.layers.size()) {
    d.push_back("layer count " + std::to_string(a.layers.size()) + " vs " + std::to_string(b.layers.size()));
    return d;
  }
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const LayerSpec &x = a.layers[l], &y = b.layers[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    field((p + "type").c_str(), layer_type_name(x.type), layer_type_name(y.type));
    field((p + "head_dim").c_str(), x.head_dim, y.head_dim);
    field((p + "num_kv_heads").c_str(), x.num_kv_heads, y.num_kv_heads);
    field((p + "k_eq_v").c_str(), x.k_eq_v, y.k_eq_v);
    field((p + "kv_shared").c_str(), x.kv_shared, y.kv_shared);
    field((p + "kv_source").c_str(), x.kv_source, y.kv_source);
    field((p + "stores_kv").c_str(), x.stores_kv, y.stores_kv);
    field((p + "mlp_intermediate").c_str(), x.mlp_intermediate, y.mlp_intermediate);
  }
  return d;
}

void record_config_agreement(Reporter& r, const std::string& name, const Config& a, const Config& b) {
  const std::vector<std::string> d = config_differences(a, b);
  r.record(name, "differing_fields", static_cast<double>(d.size()), 0, d.empty(),
           d.empty() ? std::to_string(a.num_hidden_layers) + " layer specs identical" : "first: " + d.front());
}

// `full`: the config whose serializations are compared; `tiny`: a model-sized one run both ways.
void check_serializations(const json& full, const json& tiny, const SuiteOptions& o, Reporter& r) {
  const Config original = parse_config(full);
  const Config global = parse_config(global_form(full)), per_layer = parse_config(per_layer_form(full));
  record_config_agreement(r, "config: global fields vs per_layer_config", global, per_layer);
  record_config_agreement(r, "config: as written vs per_layer_config", original, per_layer);

  const Config tiny_global = parse_config(global_form(tiny)), tiny_per_layer = parse_config(per_layer_form(tiny));
  const std::string why = unsupported(o, tiny_global);
  if (!why.empty()) return r.not_supported(why);
  const ModelWeights w_global = random_weights(tiny_global, 11, o.dtype, o.device);
  // The same tensors by name, placed by the other config (throws if it implies other shapes).
  const ModelWeights w_per_layer =
      golden::weights_from_map(tiny_per_layer, golden::weights_to_map(tiny_global, w_global), o.dtype, o.device);
  const TensorMap inputs = golden::make_model_inputs(tiny_global, 2, 12, 11);
  const TensorMap a = run(o, tiny_global, w_global, inputs, KvKeyConvention::kLayerType);
  const TensorMap b = run(o, tiny_per_layer, w_per_layer, inputs, KvKeyConvention::kLayerType);
  compare_runs(o, r, "model: per_layer_config vs global fields: ", b, a,
               truth_if_needed(o, tiny_global, w_global, inputs, KvKeyConvention::kLayerType), inputs);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  return json::parse(in);
}

// --- weight layouts --------------------------------------------------------------------------

struct Layout {
  std::string dir;     // under golden/transformers
  std::string prefix;  // the text model's root in the checkpoint
  std::string what;
};
const std::vector<Layout> kLayouts = {
    {"e2b_like", "model.language_model.", "Gemma4ForConditionalGeneration, sharded"},
    {"dense_keqv", "model.", "Gemma4ForCausalLM, one file"},
};

void check_layout(const Layout& layout, const SuiteOptions& o, Reporter& r) {
  const std::string dir = files::join(files::join(o.golden_dir, "transformers"), layout.dir);
  const Model model = load_model(dir, o.dtype, o.device);
  ModelWeights w = model.weights();
  int expected = 0;
  for (const WeightSlot& s : weight_slots(model.config(), w)) expected += s.trainable && s.tensor->defined();
  const auto tensors = model.named_trainable_tensors();
  const std::string key = tensors.empty() ? "" : tensors.front().first;
  const bool prefix_ok = !key.empty() && key.rfind(layout.prefix, 0) == 0;
  // Every row's value is a count of faults (0 passes), so that the calibration table reads it as error / bound.
  const int wrong = std::abs(static_cast<int>(tensors.size()) - expected) + (prefix_ok ? 0 : 1);
  r.record("tensors loaded", "missing_or_misnamed_tensors", wrong, 0, wrong == 0,
           layout.what + "; " + std::to_string(tensors.size()) + " of " + std::to_string(expected) + " loaded, first key " +
               key + (prefix_ok ? "" : " (expected prefix " + layout.prefix + ")"));
}

}  // namespace

std::vector<Check> key_conventions_checks(const SuiteOptions& o) {
  std::vector<Check> checks;
  for (const std::string& file : released_configs()) {
    checks.push_back({Category::kKeyConventions, "rendezvous/" + file,
                      [file](const SuiteOptions& o, Reporter& r) { check_rendezvous(file, o, r); }});
  }
  for (const std::string& file : released_configs()) {
    checks.push_back({Category::kKeyConventions, "serializations/" + file, [file](const SuiteOptions& o, Reporter& r) {
                        check_serializations(golden::load_released_config(file, golden::released_configs_dir()),
                                             tiny_json(file), o, r);
                      }});
  }
  // The transformers cases, written one way or the other (per_layer_config: dense_keqv,
  // bidirectional, padded_batch; global fields: e2b_like, moe); they are model-sized already.
  const std::string transformers = files::join(o.golden_dir, "transformers");
  if (files::is_directory(transformers)) {
    for (const std::string& name : files::list_directory(transformers)) {
      const std::string path = files::join(files::join(transformers, name), "config.json");
      if (!files::is_file(path)) continue;
      checks.push_back({Category::kKeyConventions, "serializations/transformers/" + name, [path](const SuiteOptions& o, Reporter& r) {
                          const json j = unwrap(read_json(path));
                          check_serializations(j, j, o, r);
                        }});
    }
  }
  for (const Layout& layout : kLayouts) {
    checks.push_back({Category::kKeyConventions, "weight-layouts/" + layout.dir,
                      [layout](const SuiteOptions& o, Reporter& r) { check_layout(layout, o, r); }});
  }
  return checks;
}

}  // namespace gemma4::conformance
