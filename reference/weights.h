#pragma once
// The tensors of a Gemma-4 text model, named as in Hugging Face checkpoints relative to the text
// model's root (checkpoint key = prefix + name, except lm_head.weight, which sits at the top).
// A tensor a layer does not have (k_proj on a KV-shared layer, v_proj on a K=V layer, PLE and MoE
// tensors when disabled) is left undefined.
#include <torch/types.h>

#include <string>
#include <vector>

#include "reference/config.h"

namespace gemma4 {

struct AttentionWeights {
  torch::Tensor q_proj, q_norm, k_proj, k_norm, v_proj, o_proj;  // v_norm has no scale
};

struct MlpWeights {
  torch::Tensor gate_proj, up_proj, down_proj;
};

struct MoeWeights {
  torch::Tensor router_proj, router_scale, per_expert_scale;
  torch::Tensor gate_up_proj;  // [E, 2I, H], gate half first
  torch::Tensor down_proj;     // [E, H, I]
  torch::Tensor post_feedforward_layernorm_1, pre_feedforward_layernorm_2, post_feedforward_layernorm_2;
};

struct LayerWeights {
  AttentionWeights attn;
  MlpWeights mlp;
  MoeWeights moe;
  torch::Tensor input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm;
  torch::Tensor per_layer_input_gate, per_layer_projection, post_per_layer_input_norm;  // PLE
  torch::Tensor layer_scalar;  // [1], a persistent buffer: loaded, never trained
};

struct ModelWeights {
  torch::Tensor embed_tokens;
  torch::Tensor embed_tokens_per_layer, per_layer_model_projection, per_layer_projection_norm;  // PLE
  std::vector<LayerWeights> layers;
  torch::Tensor norm;
  torch::Tensor lm_head;  // undefined when tie_word_embeddings: the embedding is used
};

struct WeightSlot {
  std::string name;            // "layers.3.self_attn.q_proj.weight", or "lm_head.weight"
  torch::Tensor* tensor;       // where the loaded tensor goes
  std::vector<int64_t> shape;  // the shape the config implies
  bool trainable;              // false only for layer_scalar buffers
};

// The number of elements of the slots' shapes together (a double: whole models exceed 2^31).
double slot_elements(const std::vector<WeightSlot>& slots);

// Every tensor the config calls for, in a fixed order (resizes weights.layers).
std::vector<WeightSlot> weight_slots(const Config& config, ModelWeights& weights);
std::vector<WeightSlot> layer_weight_slots(const Config& config, int layer, LayerWeights& weights);

// Names a KV-shared layer may carry in older checkpoints without using them (GEMMA4.md).
bool is_unused_shared_kv_weight(const Config& config, const std::string& name);

// Seeded weights for tests, goldens and benchmarks at real geometry without a checkpoint, from
// counter_uniform (bit-for-bit reproducible; stream name = the slot name): uniform(0.5, 1.5) for
// norm scales, router scales and layer_scalar; zero-mean uniform with variance 1/fan_in for
// matrices (1 for embeddings). Generated in fp32, then cast to `dtype`.
torch::Tensor random_weight(const std::string& name, at::IntArrayRef shape, uint64_t seed);  // fp32, CPU
ModelWeights random_weights(const Config& config, uint64_t seed, torch::ScalarType dtype, const torch::Device& device);

// Fresh autograd leaves over the same storage: trainable tensors require grad, and gradients land on
// these leaves, never on the caller's tensors.
ModelWeights fresh_leaves(const Config& config, const ModelWeights& weights);

// Trainable tensors get requires_grad.
void set_requires_grad(const Config& config, ModelWeights& weights, bool requires_grad);

}  // namespace gemma4
