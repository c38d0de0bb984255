#pragma once
// The Gemma-4 text config: read from a Hugging Face config.json, validated, and resolved into one
// LayerSpec per layer so that the model never re-derives geometry (GEMMA4.md, "Layer types").
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gemma4 {

enum class LayerType { kSliding, kFull };
const char* layer_type_name(LayerType type);  // "sliding_attention" / "full_attention"

struct RopeParameters {
  std::string rope_type;               // "default" or "proportional"
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;  // proportional only: fraction of head dim that rotates
  double factor = 1.0;                 // proportional only: inv_freq is divided by it
};

// Everything about one decoder layer that follows from the config.
struct LayerSpec {
  LayerType type = LayerType::kSliding;
  int64_t head_dim = 0;
  int64_t num_kv_heads = 0;
  bool k_eq_v = false;         // full layer with attention_k_eq_v: no v_proj, v comes from k_proj
  bool kv_shared = false;      // reads the K/V stored by kv_source; has no k/v weights
  int kv_source = -1;          // for shared layers, the layer whose K/V it reads
  bool stores_kv = false;      // last non-shared layer of its type before the sharing point
  int64_t mlp_intermediate = 0;  // doubled on KV-shared layers when use_double_wide_mlp
};

struct Config {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t sliding_window = 0;  // as written in config.json
  double rms_norm_eps = 1e-6;
  std::string hidden_activation = "gelu_pytorch_tanh";
  bool tie_word_embeddings = true;
  // The embeddings' padding_idx: that row gets no gradient from the lookup (nn.Embedding
  // semantics; transformers passes pad_token_id, default 0). -1 when the config sets null.
  int64_t pad_token_id = 0;
  std::optional<double> final_logit_softcapping;
  // use_bidirectional_attention == "all": no causal mask; sliding layers see |i - j| <= window/2 + 1.
  bool bidirectional = false;

  int64_t num_kv_shared_layers = 0;
  int64_t hidden_size_per_layer_input = 0;  // P: per-layer embeddings when > 0
  int64_t vocab_size_per_layer_input = 0;
  bool attention_k_eq_v = false;
  bool use_double_wide_mlp = false;

  bool enable_moe_block = false;
  int64_t num_experts = 0;
  int64_t top_k_experts = 0;
  int64_t moe_intermediate_size = 0;

  std::vector<LayerType> layer_types;
  std::map<LayerType, RopeParameters> rope;
  std::vector<LayerSpec> layers;  // resolved, one per layer

  // The text config as read (nested text_config already unwrapped), kept for provenance.
  nlohmann::json text_config_json;

  int first_kv_shared_layer() const { return static_cast<int>(num_hidden_layers - num_kv_shared_layers); }
};

// Accepts the flat gemma4_text form and the nested form ({"text_config": {...}}), and both
// serializations of the global geometry (top-level global_head_dim / num_global_key_value_heads,
// or per_layer_config). Throws gemma4::Error naming the field or layer at fault.
Config parse_config(const nlohmann::json& config_json);
Config load_config(const std::string& path);  // prefixes errors with the path

}  // namespace gemma4
