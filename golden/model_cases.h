#pragma once
// Model-level and layer-level golden cases (golden/FORMAT.md, "Model cases", "Layer cases"), and
// the reference computations behind them, shared by generation and verification.
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <string>
#include <vector>

#include "golden/golden_file.h"
#include "reference/config.h"
#include "reference/kv_sharing.h"
#include "reference/model.h"
#include "reference/weights.h"

namespace gemma4::golden {

// A released model shrunk to a few tiny layers: every structural flag of the released config
// (layer pattern, K=V, KV sharing, PLE, double-wide MLP, MoE, softcap, RoPE) is kept; only the
// sizes change. Batch 2, the second row left-padded.
struct ModelCase {
  std::string name;     // without "model/"
  std::string summary;
  std::string released_config;  // file in the released configs directory
  int64_t num_layers;
  int64_t num_kv_shared_layers;
};
const std::vector<ModelCase>& model_cases();

// One decoder layer of a released model at full size (S = 4096), weights generated from the seed.
struct LayerCase {
  std::string name;  // without "real/"
  std::string summary;
  std::string released_config;
  LayerType type;    // the first layer of this type is run
  int64_t seq_len;
};
const std::vector<LayerCase>& layer_cases();

// reference/configs/ of the data directory (golden/data_dir.h): the released models' text configs.
std::string released_configs_dir();
// The released models by the short names the benchmarks and reports use, with their config files,
// in the order they are listed: 31b, 26b-a4b, e2b, e4b.
struct ReleasedModel {
  std::string name;  // "31b"
  std::string file;  // "gemma-4-31b.json" in released_configs_dir()
};
const std::vector<ReleasedModel>& released_models();
nlohmann::json load_released_config(const std::string& file, const std::string& configs_dir);
nlohmann::json tiny_config(const ModelCase& model_case, const std::string& configs_dir);

// Seeded inputs: input_ids, labels, attention_mask (row 1 left-padded by 3). labels are -100 on
// padding and wherever the predicting position (t - 1) is padding (FORMAT.md, "Don't-care positions").
TensorMap make_model_inputs(const Config& config, int64_t batch, int64_t seq_len, uint64_t seed);
// labels with -100 wherever the token or the position that predicts it is padding.
torch::Tensor labels_without_padding(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

// The judged/ masks of a model case: the per-position outputs (logits, hidden states, attention
// outputs, shared K/V) are don't-care at padded positions, and, when pad_token_id (>= 0) occurs at
// a real position, so is that row of the embedding tables' gradients. Empty when neither applies.
TensorMap model_judged(const TensorMap& inputs, const TensorMap& expected, int64_t pad_token_id = -1);

// Weights by name (weight_slots names) and back; from_map casts to dtype and device and throws
// naming any missing or mis-shaped weight.
TensorMap weights_to_map(const Config& config, const ModelWeights& weights);
ModelWeights weights_from_map(const Config& config, const TensorMap& weights, torch::ScalarType dtype,
                              const torch::Device& device);

// The model's inputs from a case's inputs/ (input_ids, optional labels and attention_mask).
ForwardInputs forward_inputs(const TensorMap& inputs, const torch::Device& device);

// Forward and backward of the whole model: "outputs/..." and "grads/<weight name>" (FORMAT.md).
// `options` picks the KV key convention and checkpointing; layer outputs are always kept.
TensorMap run_model(const Config& config, const ModelWeights& weights, const TensorMap& inputs,
                    ForwardOptions options = {});

// One layer of `config`: inputs "hidden" (and "per_layer_input" with PLE), upstream "hidden".
int first_layer_of_type(const Config& config, LayerType type);
TensorMap layer_weights_to_map(const Config& config, int layer, const LayerWeights& weights);
LayerWeights random_layer_weights(const Config& config, int layer, uint64_t seed, torch::ScalarType dtype,
                                  const torch::Device& device);
TensorMap make_layer_inputs(const Config& config, int64_t seq_len, uint64_t seed, bool upstream);
TensorMap run_layer(const Config& config, int layer, const LayerWeights& weights, const TensorMap& inputs,
                    const TensorMap& upstream, const LayerOps& ops = reference_layer_ops());

}  // namespace gemma4::golden
