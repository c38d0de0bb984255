#include "golden/model_cases.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstdlib>
#include <fstream>

#include "golden/data_dir.h"
#include "reference/counter_random.h"
#include "reference/decoder_layer.h"
#include "reference/error.h"
#include "reference/files.h"
#include "reference/model.h"
#include "reference/ops.h"

namespace gemma4::golden {
namespace {

using torch::Tensor;

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 12;
constexpr int64_t kLeftPadding = 3;  // of batch row 1

// The sizes of every tiny model; the structure comes from the released config.
const nlohmann::json kTinySizes = {
    {"vocab_size", 96},         {"hidden_size", 32},        {"intermediate_size", 48},
    {"num_attention_heads", 4}, {"head_dim", 8},            {"global_head_dim", 16},
    {"sliding_window", 4},      {"moe_intermediate_size", 16}, {"num_experts", 8},
    {"top_k_experts", 2},       {"hidden_size_per_layer_input", 8}, {"vocab_size_per_layer_input", 96},
};

Tensor grad_or_zeros(const Tensor& t) { return t.grad().defined() ? t.grad() : at::zeros_like(t); }

}  // namespace

const std::vector<ModelCase>& model_cases() {
  static const std::vector<ModelCase> cases = {
      {"e2b", "E2B in miniature: PLE, KV sharing (2 shared layers), double-wide MLP, MQA, softcap", "gemma-4-e2b.json", 7, 2},
      {"e4b", "E4B in miniature: PLE, KV sharing (2 shared layers), GQA", "gemma-4-e4b.json", 8, 2},
      {"31b", "31B in miniature: dense, K=V global layers with their own kv heads and head dim", "gemma-4-31b.json", 4, 0},
      {"26b-a4b", "26B-A4B in miniature: MoE beside the MLP on every layer (8 experts, top 2), K=V", "gemma-4-26b-a4b.json", 3, 0},
  };
  return cases;
}

const std::vector<LayerCase>& layer_cases() {
  static const std::vector<LayerCase> cases = {
      {"e2b-sliding", "E2B sliding layer 0: head dim 256, 1 kv head, window 512, PLE", "gemma-4-e2b.json", LayerType::kSliding, 4096},
      {"e2b-full", "E2B global layer: head dim 512, 1 kv head, proportional RoPE, PLE", "gemma-4-e2b.json", LayerType::kFull, 4096},
      {"e4b-sliding", "E4B sliding layer 0: head dim 256, 2 kv heads, window 512, PLE", "gemma-4-e4b.json", LayerType::kSliding, 4096},
      {"e4b-full", "E4B global layer: head dim 512, 2 kv heads, PLE", "gemma-4-e4b.json", LayerType::kFull, 4096},
      {"31b-sliding", "31B sliding layer 0: head dim 256, 32/16 heads, window 1024", "gemma-4-31b.json", LayerType::kSliding, 4096},
      {"31b-full", "31B global layer: head dim 512, 32 q / 4 kv heads, K=V", "gemma-4-31b.json", LayerType::kFull, 4096},
      {"26b-a4b-sliding", "26B-A4B sliding layer 0: MoE 128 experts top 8, window 1024", "gemma-4-26b-a4b.json", LayerType::kSliding, 4096},
      {"26b-a4b-full", "26B-A4B global layer: head dim 512, K=V, MoE", "gemma-4-26b-a4b.json", LayerType::kFull, 4096},
  };
  return cases;
}

std::string released_configs_dir() { return files::join(data_dir(), "reference/configs"); }

const std::vector<ReleasedModel>& released_models() {
  static const std::vector<ReleasedModel> models{{"31b", "gemma-4-31b.json"},
                                                 {"26b-a4b", "gemma-4-26b-a4b.json"},
                                                 {"e2b", "gemma-4-e2b.json"},
                                                 {"e4b", "gemma-4-e4b.json"}};
  return models;
}

nlohmann::json load_released_config(const std::string& file, const std::string& configs_dir) {
  const std::string path = files::join(configs_dir, file);
  std::ifstream in(path);
  if (!in) throw Error("cannot read released config " + path + " (golden generate takes --configs DIR)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": " + e.what());
  }
  return j.contains("text_config") ? j["text_config"] : j;
}

nlohmann::json tiny_config(const ModelCase& mc, const std::string& configs_dir) {
  nlohmann::json j = load_released_config(mc.released_config, configs_dir);
  const int64_t released_kv = j.value("num_key_value_heads", 1);
  for (const auto& [key, value] : kTinySizes.items()) {
    const bool feature_on = (key.find("per_layer_input") == std::string::npos || j.value("hidden_size_per_layer_input", 0) > 0) &&
                            (key.find("expert") == std::string::npos || j.value("enable_moe_block", false));
    if (feature_on) j[key] = value;
  }
  j["num_key_value_heads"] = released_kv == 1 ? 1 : 2;  // keep MQA where the released model has it
  if (j.value("attention_k_eq_v", false)) j["num_global_key_value_heads"] = 1;
  j["num_hidden_layers"] = mc.num_layers;
  j["num_kv_shared_layers"] = mc.num_kv_shared_layers;
  // The released pattern, cut to length; the last layer is full, as transformers forces.
  std::vector<std::string> types(j["layer_types"].begin(), j["layer_types"].begin() + mc.num_layers);
  types.back() = "full_attention";
  j["layer_types"] = types;
  j.erase("per_layer_config");
  return j;
}

TensorMap make_model_inputs(const Config& c, int64_t batch, int64_t seq_len, uint64_t seed) {
  // Ids avoid the pad token, so every real position has a gradient path through its embedding row.
  const int64_t vocab = c.hidden_size_per_layer_input > 0 ? std::min(c.vocab_size, c.vocab_size_per_layer_input) : c.vocab_size;
  Tensor ids = counter_integers(seed, "inputs/input_ids", {batch, seq_len}, vocab - 1) + 1;
  Tensor mask = at::ones({batch, seq_len}, at::kLong);
  if (batch > 1) mask[1].slice(0, 0, kLeftPadding).zero_();
  ids.masked_fill_(mask == 0, std::max<int64_t>(c.pad_token_id, 0));
  return {{"input_ids", ids}, {"labels", labels_without_padding(ids, mask)}, {"attention_mask", mask}};
}

Tensor labels_without_padding(const Tensor& input_ids, const Tensor& attention_mask) {
  // logits[t] predicts labels[t + 1]: a label whose predicting position is padding would make the
  // loss depend on an implementation-defined row (a query that sees no key).
  const Tensor real = attention_mask != 0;
  const Tensor predictor_real = at::cat({at::ones({real.size(0), 1}, real.options()), real.slice(1, 0, -1)}, 1);
  return input_ids.clone().masked_fill_(~(real & predictor_real), -100);
}

TensorMap model_judged(const TensorMap& inputs, const TensorMap& expected, int64_t pad_token_id) {
  TensorMap out;
  auto it = inputs.find("attention_mask");
  const Tensor ids = inputs.at("input_ids").cpu();
  const Tensor real = it == inputs.end() ? at::ones_like(ids) : it->second.ne(0).to(torch::kInt64).cpu();  // [B, S]
  // The pad token's embedding row: whether its lookup trains is the implementation's choice
  // (transformers builds nn.Embedding(padding_idx=pad_token_id) and freezes it; a port without
  // padding_idx trains it). Only a real position holding the pad id tells them apart: then the
  // row of every embedding table's gradient is don't-care (FORMAT.md, "Implementation-defined values").
  if (pad_token_id >= 0 && (ids.eq(pad_token_id) & real.ne(0)).any().item<bool>()) {
    for (const char* table : {"grads/embed_tokens.weight", "grads/embed_tokens_per_layer.weight"}) {
      auto t = expected.find(table);
      if (t == expected.end() || pad_token_id >= t->second.size(0)) continue;
      Tensor rows = at::ones({t->second.size(0), 1}, at::kLong);
      rows[pad_token_id] = 0;
      out[table] = rows;
    }
  }
  if (real.ne(0).all().item<bool>()) return out;
  const int64_t B = real.size(0), S = real.size(1);
  for (const auto& [name, t] : expected) {
    if (name.rfind("outputs/", 0) != 0 || name == "outputs/loss") continue;
    // K/V are [B, Hkv, S, D]; every other per-position output is [B, S, ...].
    const bool kv = name.rfind("outputs/shared_kv/", 0) == 0;
    std::vector<int64_t> shape(t.dim(), 1);
    shape[0] = B;
    shape[kv ? 2 : 1] = S;
    out[name] = real.view(shape);
  }
  return out;
}

TensorMap weights_to_map(const Config& c, const ModelWeights& weights) {
  TensorMap out;
  ModelWeights& w = const_cast<ModelWeights&>(weights);  // slots are only read
  for (const WeightSlot& slot : weight_slots(c, w)) out[slot.name] = slot.tensor->detach();
  return out;
}

ModelWeights weights_from_map(const Config& c, const TensorMap& map, torch::ScalarType dtype, const torch::Device& device) {
  ModelWeights w;
  for (WeightSlot& slot : weight_slots(c, w)) {
    auto it = map.find(slot.name);
    if (it == map.end()) throw Error("weight '" + slot.name + "' is missing");
    if (it->second.sizes() != at::IntArrayRef(slot.shape)) {
      throw Error("weight '" + slot.name + "' has shape " + shape_string(it->second.sizes()) + ", the config implies " +
                  shape_string(slot.shape));
    }
    *slot.tensor = it->second.to(device, dtype);
  }
  return w;
}

ForwardInputs forward_inputs(const TensorMap& inputs, const torch::Device& device) {
  if (!inputs.count("input_ids")) throw Error("a model case needs inputs/input_ids");
  ForwardInputs in;
  in.input_ids = inputs.at("input_ids").to(device);
  if (inputs.count("labels")) in.labels = inputs.at("labels").to(device);
  if (inputs.count("attention_mask")) in.attention_mask = inputs.at("attention_mask").to(device);
  // Packed rows (FORMAT.md, "Real-size goldens"): the positions restart at each sequence.
  if (inputs.count("position_ids")) in.position_ids = inputs.at("position_ids").to(device);
  return in;
}

TensorMap run_model(const Config& c, const ModelWeights& weights, const TensorMap& inputs, ForwardOptions options) {
  ModelWeights w = fresh_leaves(c, weights);  // not const: weight_slots hands out pointers
  const Model model(c, w);
  const ForwardInputs in = forward_inputs(inputs, model.device());
  if (!in.labels.defined()) throw Error("a model case needs inputs/labels (its gradients are of the loss)");

  options.keep_layer_outputs = true;
  torch::AutoGradMode grad_mode(true);
  const ForwardOutputs out = model.forward(in, options);
  out.loss.backward();

  TensorMap result;
  result["outputs/logits"] = out.logits.detach();
  result["outputs/loss"] = out.loss.detach();
  for (size_t i = 0; i < out.hidden_states.size(); ++i) result["outputs/hidden_states/" + std::to_string(i)] = out.hidden_states[i].detach();
  for (size_t l = 0; l < out.attention_outputs.size(); ++l) result["outputs/attention_output/" + std::to_string(l)] = out.attention_outputs[l].detach();
  for (const auto& [l, kv] : out.stored_kv) {
    result["outputs/shared_kv/" + std::to_string(l) + "/k"] = kv.first.detach();
    result["outputs/shared_kv/" + std::to_string(l) + "/v"] = kv.second.detach();
  }
  for (const WeightSlot& slot : weight_slots(c, w)) {
    if (slot.trainable && slot.tensor->defined()) result["grads/" + slot.name] = grad_or_zeros(*slot.tensor);
  }
  return result;
}

int first_layer_of_type(const Config& c, LayerType type) {
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layers[l].type == type && !c.layers[l].kv_shared) return l;
  }
  throw Error(std::string("the config has no ") + layer_type_name(type) + " layer that computes its own K/V");
}

TensorMap layer_weights_to_map(const Config& c, int layer, const LayerWeights& weights) {
  TensorMap out;
  for (const WeightSlot& slot : layer_weight_slots(c, layer, const_cast<LayerWeights&>(weights))) out[slot.name] = slot.tensor->detach();
  return out;
}

LayerWeights random_layer_weights(const Config& c, int layer, uint64_t seed, torch::ScalarType dtype, const torch::Device& device) {
  LayerWeights w;
  for (WeightSlot& slot : layer_weight_slots(c, layer, w)) *slot.tensor = random_weight(slot.name, slot.shape, seed).to(device, dtype);
  return w;
}

TensorMap make_layer_inputs(const Config& c, int64_t seq_len, uint64_t seed, bool upstream) {
  TensorMap out;
  const int64_t H = c.hidden_size;
  if (upstream) {
    out["hidden"] = counter_uniform(seed, "upstream/hidden", {1, seq_len, H}, 0.0, 1.0);
    return out;
  }
  // A residual stream of RMS about 1, as after the scaled embedding.
  out["hidden"] = counter_uniform(seed, "inputs/hidden", {1, seq_len, H}, 0.0, 1.7);
  if (c.hidden_size_per_layer_input > 0) {
    out["per_layer_input"] = counter_uniform(seed, "inputs/per_layer_input", {1, seq_len, c.hidden_size_per_layer_input}, 0.0, 1.7);
  }
  return out;
}

TensorMap run_layer(const Config& c, int l, const LayerWeights& weights, const TensorMap& inputs, const TensorMap& upstream,
                    const LayerOps& ops) {
  const LayerSpec& spec = c.layers[l];
  if (spec.kv_shared) throw Error("layer " + std::to_string(l) + " is KV-shared: a layer case needs a layer with its own K/V");
  LayerWeights w = weights;
  std::vector<Tensor> params;
  for (WeightSlot& slot : layer_weight_slots(c, l, w)) {
    if (!slot.trainable) continue;
    *slot.tensor = slot.tensor->detach().requires_grad_(true);
    params.push_back(*slot.tensor);
  }
  torch::AutoGradMode grad_mode(true);
  const Tensor hidden = inputs.at("hidden").detach().requires_grad_(true);
  const Tensor ple = inputs.count("per_layer_input") ? inputs.at("per_layer_input").detach().requires_grad_(true) : Tensor();
  const int64_t S = hidden.size(1);
  const RopeTable rope = rope_table(c.rope.at(spec.type), spec.head_dim, S, hidden.scalar_type(), hidden.device());
  const LayerOutputs out = decoder_layer(c, l, w, LayerInputs{hidden, ple, Tensor(), Tensor(), rope.cos, rope.sin, Tensor()}, ops);

  std::vector<Tensor> wrt{hidden};
  if (ple.defined()) wrt.push_back(ple);
  wrt.insert(wrt.end(), params.begin(), params.end());
  const auto grads = torch::autograd::grad({out.hidden}, wrt, {upstream.at("hidden")}, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  TensorMap result{{"outputs/hidden", out.hidden.detach()},
                   {"outputs/attention_output", out.attention.detach()},
                   {"outputs/k", out.k.detach()},
                   {"outputs/v", out.v.detach()}};
  size_t g = 0;
  result["grads/hidden"] = grads[g++];
  if (ple.defined()) result["grads/per_layer_input"] = grads[g++];
  for (const WeightSlot& slot : layer_weight_slots(c, l, w)) {
    if (!slot.trainable) continue;
    result["grads/" + slot.name] = grads[g].defined() ? grads[g] : at::zeros_like(*slot.tensor);
    ++g;
  }
  return result;
}

}  // namespace gemma4::golden
