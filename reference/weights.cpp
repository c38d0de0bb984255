#include "reference/weights.h"

#include <ATen/ATen.h>

#include <cmath>
#include <regex>

#include "reference/counter_random.h"

namespace gemma4 {
namespace {

bool is_scale(const std::string& name) {
  static const std::regex scale(R"((norm[^.]*\.weight|router\.scale|per_expert_scale|layer_scalar)$)");
  return std::regex_search(name, scale);
}

}  // namespace

// Shapes follow transformers' module definitions.
std::vector<WeightSlot> layer_weight_slots(const Config& c, int l, LayerWeights& w) {
  std::vector<WeightSlot> out;
  const LayerSpec& s = c.layers[l];
  const int64_t H = c.hidden_size, D = s.head_dim, Hq = c.num_attention_heads, Hkv = s.num_kv_heads;
  const std::string p = "layers." + std::to_string(l) + ".";
  auto add = [&](const std::string& name, torch::Tensor& t, std::vector<int64_t> shape, bool trainable = true) {
    out.push_back({p + name, &t, std::move(shape), trainable});
  };
  add("self_attn.q_proj.weight", w.attn.q_proj, {Hq * D, H});
  add("self_attn.q_norm.weight", w.attn.q_norm, {D});
  if (!s.kv_shared) {
    add("self_attn.k_proj.weight", w.attn.k_proj, {Hkv * D, H});
    add("self_attn.k_norm.weight", w.attn.k_norm, {D});
    if (!s.k_eq_v) add("self_attn.v_proj.weight", w.attn.v_proj, {Hkv * D, H});
  }
  add("self_attn.o_proj.weight", w.attn.o_proj, {H, Hq * D});
  add("mlp.gate_proj.weight", w.mlp.gate_proj, {s.mlp_intermediate, H});
  add("mlp.up_proj.weight", w.mlp.up_proj, {s.mlp_intermediate, H});
  add("mlp.down_proj.weight", w.mlp.down_proj, {H, s.mlp_intermediate});
  add("input_layernorm.weight", w.input_layernorm, {H});
  add("post_attention_layernorm.weight", w.post_attention_layernorm, {H});
  add("pre_feedforward_layernorm.weight", w.pre_feedforward_layernorm, {H});
  add("post_feedforward_layernorm.weight", w.post_feedforward_layernorm, {H});
  if (c.hidden_size_per_layer_input > 0) {
    const int64_t P = c.hidden_size_per_layer_input;
    add("per_layer_input_gate.weight", w.per_layer_input_gate, {P, H});
    add("per_layer_projection.weight", w.per_layer_projection, {H, P});
    add("post_per_layer_input_norm.weight", w.post_per_layer_input_norm, {H});
  }
  if (c.enable_moe_block) {
    const int64_t E = c.num_experts, I = c.moe_intermediate_size;
    add("router.proj.weight", w.moe.router_proj, {E, H});
    add("router.scale", w.moe.router_scale, {H});
    add("router.per_expert_scale", w.moe.per_expert_scale, {E});
    add("experts.gate_up_proj", w.moe.gate_up_proj, {E, 2 * I, H});
    add("experts.down_proj", w.moe.down_proj, {E, H, I});
    add("post_feedforward_layernorm_1.weight", w.moe.post_feedforward_layernorm_1, {H});
    add("pre_feedforward_layernorm_2.weight", w.moe.pre_feedforward_layernorm_2, {H});
    add("post_feedforward_layernorm_2.weight", w.moe.post_feedforward_layernorm_2, {H});
  }
  add("layer_scalar", w.layer_scalar, {1}, /*trainable=*/false);
  return out;
}

std::vector<WeightSlot> weight_slots(const Config& c, ModelWeights& w) {
  std::vector<WeightSlot> out;
  const int64_t H = c.hidden_size, L = c.num_hidden_layers;
  out.push_back({"embed_tokens.weight", &w.embed_tokens, {c.vocab_size, H}, true});
  if (c.hidden_size_per_layer_input > 0) {
    const int64_t P = c.hidden_size_per_layer_input;
    out.push_back({"embed_tokens_per_layer.weight", &w.embed_tokens_per_layer, {c.vocab_size_per_layer_input, L * P}, true});
    out.push_back({"per_layer_model_projection.weight", &w.per_layer_model_projection, {L * P, H}, true});
    out.push_back({"per_layer_projection_norm.weight", &w.per_layer_projection_norm, {P}, true});
  }
  w.layers.resize(L);
  for (int l = 0; l < L; ++l) {
    for (WeightSlot& slot : layer_weight_slots(c, l, w.layers[l])) out.push_back(std::move(slot));
  }
  out.push_back({"norm.weight", &w.norm, {H}, true});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", &w.lm_head, {c.vocab_size, H}, true});
  return out;
}

bool is_unused_shared_kv_weight(const Config& c, const std::string& name) {
  static const std::regex shared_kv(R"(^layers\.(\d+)\.self_attn\.(k_proj|v_proj|k_norm|v_norm)\.weight$)");
  std::smatch m;
  if (!std::regex_match(name, m, shared_kv)) return false;
  const long l = std::stol(m[1].str());
  return l < c.num_hidden_layers && c.layers[l].kv_shared;
}

torch::Tensor random_weight(const std::string& name, at::IntArrayRef shape, uint64_t seed) {
  if (is_scale(name)) return counter_uniform(seed, name, shape, 1.0, 0.5);
  // Variance 1 for embeddings, 1/fan_in for projections: uniform(-a, a) has variance a^2/3.
  const bool embedding = name.find("embed_tokens") != std::string::npos;
  const double variance = embedding ? 1.0 : 1.0 / static_cast<double>(shape.back());
  return counter_uniform(seed, name, shape, 0.0, std::sqrt(3.0 * variance));
}

ModelWeights random_weights(const Config& c, uint64_t seed, torch::ScalarType dtype, const torch::Device& device) {
  ModelWeights w;
  for (WeightSlot& slot : weight_slots(c, w)) *slot.tensor = random_weight(slot.name, slot.shape, seed).to(device, dtype);
  return w;
}

ModelWeights fresh_leaves(const Config& c, const ModelWeights& weights) {
  ModelWeights w = weights;
  for (WeightSlot& slot : weight_slots(c, w)) {
    if (slot.tensor->defined()) *slot.tensor = slot.tensor->detach().requires_grad_(slot.trainable);
  }
  return w;
}

void set_requires_grad(const Config& c, ModelWeights& w, bool requires_grad) {
  for (WeightSlot& slot : weight_slots(c, w)) {
    if (slot.trainable && slot.tensor->defined()) slot.tensor->requires_grad_(requires_grad);
  }
}

double slot_elements(const std::vector<WeightSlot>& slots) {
  double n = 0;
  for (const WeightSlot& slot : slots) {
    double elements = 1;
    for (int64_t d : slot.shape) elements *= static_cast<double>(d);
    n += elements;
  }
  return n;
}

}  // namespace gemma4
