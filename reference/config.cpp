#include "reference/config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "reference/error.h"

namespace gemma4 {
namespace {

using nlohmann::json;

// A field that is absent or JSON null takes the transformers default; these fields have none
// that is safe to assume, so their absence is an error.
const char* const kRequiredFields[] = {"vocab_size",          "hidden_size",         "intermediate_size",
                                       "num_hidden_layers",   "num_attention_heads", "num_key_value_heads",
                                       "head_dim"};

constexpr int64_t kMaxLayers = 4096;

bool present(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

int64_t get_int(const json& j, const std::string& key, const std::string& where) {
  const json& v = j.at(key);
  if (!v.is_number_integer()) {
    throw Error("field '" + where + key + "' must be an integer, got " + v.dump());
  }
  return v.get<int64_t>();
}

int64_t int_or(const json& j, const char* key, int64_t fallback) {
  return present(j, key) ? get_int(j, key, "") : fallback;
}

double number_or(const json& j, const char* key, double fallback, const std::string& where = "") {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_number()) throw Error(std::string("field '") + where + key + "' must be a number, got " + v.dump());
  return v.get<double>();
}

bool bool_or(const json& j, const char* key, bool fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_boolean()) throw Error(std::string("field '") + key + "' must be true or false, got " + v.dump());
  return v.get<bool>();
}

std::string string_or(const json& j, const char* key, const std::string& fallback, const std::string& where = "") {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_string()) throw Error(std::string("field '") + where + key + "' must be a string, got " + v.dump());
  return v.get<std::string>();
}

void require_positive(int64_t value, const char* key) {
  if (value <= 0) throw Error(std::string("field '") + key + "' must be positive, got " + std::to_string(value));
}

LayerType parse_layer_type(const json& v, size_t index) {
  if (v == "sliding_attention") return LayerType::kSliding;
  if (v == "full_attention") return LayerType::kFull;
  throw Error("field 'layer_types[" + std::to_string(index) + "]' must be \"sliding_attention\" or \"full_attention\", got " +
              v.dump());
}

// GEMMA4.md: absent layer_types means layer l is full iff (l + 1) % 6 == 0; the last layer is
// always forced to full attention (transformers only warns).
std::vector<LayerType> resolve_layer_types(const json& j, int64_t num_layers) {
  std::vector<LayerType> types;
  if (present(j, "layer_types")) {
    const json& list = j.at("layer_types");
    if (!list.is_array()) throw Error("field 'layer_types' must be a list");
    if (static_cast<int64_t>(list.size()) != num_layers) {
      throw Error("field 'layer_types' has " + std::to_string(list.size()) + " entries but num_hidden_layers is " +
                  std::to_string(num_layers));
    }
    for (size_t i = 0; i < list.size(); ++i) types.push_back(parse_layer_type(list[i], i));
  } else {
    for (int64_t l = 0; l < num_layers; ++l) types.push_back((l + 1) % 6 == 0 ? LayerType::kFull : LayerType::kSliding);
  }
  types.back() = LayerType::kFull;
  return types;
}

RopeParameters default_rope(LayerType type) {
  if (type == LayerType::kSliding) return {"default", 10000.0, 1.0, 1.0};
  return {"proportional", 1000000.0, 0.25, 1.0};
}

std::map<LayerType, RopeParameters> resolve_rope(const json& j, const std::vector<LayerType>& types) {
  std::map<LayerType, RopeParameters> rope;
  const bool given = present(j, "rope_parameters");
  if (given && !j.at("rope_parameters").is_object()) throw Error("field 'rope_parameters' must be an object");
  for (LayerType type : types) {
    if (rope.count(type)) continue;
    const std::string name = layer_type_name(type);
    if (!given) {
      rope[type] = default_rope(type);
      continue;
    }
    const json& all = j.at("rope_parameters");
    if (!present(all, name.c_str())) {
      throw Error("field 'rope_parameters' has no entry for '" + name + "', which layer_types uses");
    }
    const json& p = all.at(name);
    const std::string where = "rope_parameters." + name + ".";
    RopeParameters r;
    r.rope_type = string_or(p, "rope_type", "default", where);
    if (r.rope_type != "default" && r.rope_type != "proportional") {
      throw Error("field '" + where + "rope_type' is '" + r.rope_type +
                  "'; supported rope types are 'default' and 'proportional'");
    }
    r.theta = number_or(p, "rope_theta", 10000.0, where);
    r.partial_rotary_factor = number_or(p, "partial_rotary_factor", 1.0, where);
    r.factor = number_or(p, "factor", 1.0, where);
    if (r.theta <= 0) throw Error("field '" + where + "rope_theta' must be positive");
    if (r.partial_rotary_factor < 0 || r.partial_rotary_factor > 1) {
      throw Error("field '" + where + "partial_rotary_factor' must be in [0, 1]");
    }
    if (r.factor <= 0) throw Error("field '" + where + "factor' must be positive");
    rope[type] = r;
  }
  return rope;
}

// Head dim and kv heads per layer, from either serialization (GEMMA4.md, "Conventions that
// changed"): per_layer_config {"<l>": {"head_dim", "num_key_value_heads"}} overrides the globals
// for the layers it names; otherwise full layers take global_head_dim (default 512) and, only
// when attention_k_eq_v, num_global_key_value_heads.
void resolve_attention_geometry(const json& j, Config& c) {
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    c.layers[l].head_dim = c.head_dim;
    c.layers[l].num_kv_heads = c.num_key_value_heads;
  }
  if (present(j, "per_layer_config")) {
    const json& overrides = j.at("per_layer_config");
    if (!overrides.is_object()) throw Error("field 'per_layer_config' must be an object keyed by layer index");
    for (const auto& [key, layer] : overrides.items()) {
      char* end = nullptr;
      const long l = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || l < 0 || l >= c.num_hidden_layers) {
        throw Error("field 'per_layer_config' has key '" + key + "', which is not a layer index in [0, " +
                    std::to_string(c.num_hidden_layers) + ")");
      }
      if (!layer.is_object()) throw Error("field 'per_layer_config." + key + "' must be an object");
      const std::string where = "per_layer_config." + key + ".";
      for (const auto& [attr, value] : layer.items()) {
        if (attr == "head_dim" && !value.is_null()) {
          c.layers[l].head_dim = get_int(layer, attr, where);
        } else if (attr == "num_key_value_heads" && !value.is_null()) {
          c.layers[l].num_kv_heads = get_int(layer, attr, where);
        } else if (!value.is_null()) {
          throw Error("field '" + where + attr + "' is not supported; per-layer overrides may set head_dim and num_key_value_heads");
        }
      }
    }
    return;
  }
  const int64_t global_head_dim = int_or(j, "global_head_dim", 512);
  const int64_t global_kv_heads = int_or(j, "num_global_key_value_heads", 0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_types[l] != LayerType::kFull) continue;
    c.layers[l].head_dim = global_head_dim;
    if (c.attention_k_eq_v && global_kv_heads > 0) c.layers[l].num_kv_heads = global_kv_heads;
  }
}

std::string layer_name(const Config& c, int64_t l) {
  return "layer " + std::to_string(l) + " (" + layer_type_name(c.layer_types[l]) + ")";
}

void validate_attention_geometry(const Config& c) {
  std::map<LayerType, int64_t> first_of_type;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerSpec& s = c.layers[l];
    if (s.head_dim <= 0 || s.head_dim % 2 != 0) {
      throw Error(layer_name(c, l) + ": head_dim must be positive and even (RoPE rotates pairs), got " +
                  std::to_string(s.head_dim));
    }
    if (s.num_kv_heads <= 0) {
      throw Error(layer_name(c, l) + ": num_key_value_heads must be positive, got " + std::to_string(s.num_kv_heads));
    }
    if (c.num_attention_heads % s.num_kv_heads != 0) {
      throw Error(layer_name(c, l) + ": num_attention_heads " + std::to_string(c.num_attention_heads) +
                  " is not divisible by num_key_value_heads " + std::to_string(s.num_kv_heads));
    }
    // One RoPE table and one K/V store slot per type: layers of a type must agree.
    auto [it, inserted] = first_of_type.emplace(c.layer_types[l], l);
    const LayerSpec& first = c.layers[it->second];
    if (!inserted && (first.head_dim != s.head_dim || first.num_kv_heads != s.num_kv_heads)) {
      throw Error(layer_name(c, l) + ": head_dim/num_key_value_heads " + std::to_string(s.head_dim) + "/" +
                  std::to_string(s.num_kv_heads) + " differ from layer " + std::to_string(it->second) + "'s " +
                  std::to_string(first.head_dim) + "/" + std::to_string(first.num_kv_heads) +
                  "; all layers of one type must share a geometry");
    }
  }
}

// GEMMA4.md, "KV sharing": layer l >= first_shared reads the K/V of the last layer of its type
// before first_shared. A shared layer whose type has no such source is the rendezvous failure.
void resolve_kv_sharing(Config& c) {
  if (c.num_kv_shared_layers < 0 || c.num_kv_shared_layers > c.num_hidden_layers) {
    throw Error("field 'num_kv_shared_layers' must be in [0, num_hidden_layers], got " +
                std::to_string(c.num_kv_shared_layers));
  }
  const int first_shared = c.first_kv_shared_layer();
  std::map<LayerType, int> last_before_sharing;
  for (int l = 0; l < first_shared; ++l) last_before_sharing[c.layer_types[l]] = l;
  for (const auto& [type, l] : last_before_sharing) c.layers[l].stores_kv = c.num_kv_shared_layers > 0;
  for (int l = first_shared; l < c.num_hidden_layers; ++l) {
    auto source = last_before_sharing.find(c.layer_types[l]);
    if (source == last_before_sharing.end()) {
      throw Error(layer_name(c, l) + " is KV-shared (num_kv_shared_layers " + std::to_string(c.num_kv_shared_layers) +
                  ", first shared layer " + std::to_string(first_shared) + ") but no " +
                  layer_type_name(c.layer_types[l]) +
                  " layer precedes the sharing point to store its K/V (transformers fails with KeyError '" +
                  layer_type_name(c.layer_types[l]) + "')");
    }
    c.layers[l].kv_shared = true;
    c.layers[l].kv_source = source->second;
  }
}

void resolve_mlp(Config& c) {
  // The MLP's KV-shared predicate is l >= first_shared > 0 (GEMMA4.md, Forward 4).
  const int first_shared = c.first_kv_shared_layer();
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const bool doubled = c.use_double_wide_mlp && first_shared > 0 && l >= first_shared;
    c.layers[l].mlp_intermediate = c.intermediate_size * (doubled ? 2 : 1);
  }
}

void parse_moe(const json& j, Config& c) {
  c.enable_moe_block = bool_or(j, "enable_moe_block", false);
  if (!c.enable_moe_block) return;
  for (const char* key : {"num_experts", "top_k_experts", "moe_intermediate_size"}) {
    if (!present(j, key)) throw Error(std::string("field '") + key + "' is required when enable_moe_block is true");
  }
  c.num_experts = get_int(j, "num_experts", "");
  c.top_k_experts = get_int(j, "top_k_experts", "");
  c.moe_intermediate_size = get_int(j, "moe_intermediate_size", "");
  require_positive(c.num_experts, "num_experts");
  require_positive(c.top_k_experts, "top_k_experts");
  require_positive(c.moe_intermediate_size, "moe_intermediate_size");
  if (c.top_k_experts > c.num_experts) {
    throw Error("field 'top_k_experts' (" + std::to_string(c.top_k_experts) + ") exceeds num_experts (" +
                std::to_string(c.num_experts) + ")");
  }
}

const json& text_config_of(const json& j) {
  if (!j.is_object()) throw Error("config must be a JSON object");
  if (j.contains("text_config")) {
    if (!j.at("text_config").is_object()) throw Error("field 'text_config' must be an object");
    return j.at("text_config");
  }
  return j;
}

}  // namespace

const char* layer_type_name(LayerType type) {
  return type == LayerType::kSliding ? "sliding_attention" : "full_attention";
}

Config parse_config(const json& config_json) {
  const json& j = text_config_of(config_json);
  const std::string model_type = string_or(j, "model_type", "gemma4_text");
  if (model_type != "gemma4_text") {
    throw Error("field 'model_type' is '" + model_type + "'; expected 'gemma4_text' (or a 'gemma4' config with text_config)");
  }
  for (const char* key : kRequiredFields) {
    if (!present(j, key)) throw Error(std::string("missing required field '") + key + "'");
  }
  Config c;
  c.text_config_json = j;
  c.vocab_size = get_int(j, "vocab_size", "");
  c.hidden_size = get_int(j, "hidden_size", "");
  c.intermediate_size = get_int(j, "intermediate_size", "");
  c.num_hidden_layers = get_int(j, "num_hidden_layers", "");
  c.num_attention_heads = get_int(j, "num_attention_heads", "");
  c.num_key_value_heads = get_int(j, "num_key_value_heads", "");
  c.head_dim = get_int(j, "head_dim", "");
  for (const char* key : kRequiredFields) require_positive(get_int(j, key, ""), key);
  // Per-layer tables are built from it: a damaged file claiming 2^62 layers must not loop for ever.
  if (c.num_hidden_layers > kMaxLayers) {
    throw Error("field 'num_hidden_layers' is " + std::to_string(c.num_hidden_layers) + "; at most " +
                std::to_string(kMaxLayers) + " are supported (the released models have up to 60)");
  }

  c.sliding_window = int_or(j, "sliding_window", 512);
  require_positive(c.sliding_window, "sliding_window");
  c.rms_norm_eps = number_or(j, "rms_norm_eps", 1e-6);
  c.hidden_activation = string_or(j, "hidden_activation", "gelu_pytorch_tanh");
  if (c.hidden_activation != "gelu_pytorch_tanh") {
    throw Error("field 'hidden_activation' is '" + c.hidden_activation + "'; only 'gelu_pytorch_tanh' is supported");
  }
  c.tie_word_embeddings = bool_or(j, "tie_word_embeddings", true);
  c.pad_token_id = j.contains("pad_token_id") ? int_or(j, "pad_token_id", -1) : 0;
  if (c.pad_token_id >= c.vocab_size) throw Error("field 'pad_token_id' must be below vocab_size");
  if (present(j, "final_logit_softcapping")) c.final_logit_softcapping = number_or(j, "final_logit_softcapping", 0);
  const std::string bidirectional = string_or(j, "use_bidirectional_attention", "");
  if (!bidirectional.empty() && bidirectional != "all" && bidirectional != "vision") {
    throw Error("field 'use_bidirectional_attention' must be null, \"vision\" or \"all\", got \"" + bidirectional + "\"");
  }
  c.bidirectional = bidirectional == "all";  // "vision" only affects image tokens: text stays causal

  c.num_kv_shared_layers = int_or(j, "num_kv_shared_layers", 0);
  c.hidden_size_per_layer_input = int_or(j, "hidden_size_per_layer_input", 256);
  c.vocab_size_per_layer_input = int_or(j, "vocab_size_per_layer_input", 262144);
  if (c.hidden_size_per_layer_input < 0) throw Error("field 'hidden_size_per_layer_input' must be >= 0");
  if (c.hidden_size_per_layer_input > 0) require_positive(c.vocab_size_per_layer_input, "vocab_size_per_layer_input");
  c.attention_k_eq_v = bool_or(j, "attention_k_eq_v", false);
  c.use_double_wide_mlp = bool_or(j, "use_double_wide_mlp", false);
  parse_moe(j, c);

  c.layer_types = resolve_layer_types(j, c.num_hidden_layers);
  c.rope = resolve_rope(j, c.layer_types);
  c.layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    c.layers[l].type = c.layer_types[l];
    c.layers[l].k_eq_v = c.attention_k_eq_v && c.layer_types[l] == LayerType::kFull;
  }
  resolve_attention_geometry(j, c);
  validate_attention_geometry(c);
  resolve_kv_sharing(c);
  resolve_mlp(c);
  return c;
}

Config load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open config");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  try {
    return parse_config(j);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace gemma4
