#pragma once
// The Gemma-4 text decoder with its LM head (transformers' Gemma4ForCausalLM), forward and loss;
// backward is LibTorch autograd. GEMMA4.md is the contract this follows.
#include <torch/types.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "reference/config.h"
#include "reference/kv_cache.h"
#include "reference/kv_handoff.h"
#include "reference/kv_sharing.h"
#include "reference/layer_ops.h"
#include "reference/weights.h"

namespace gemma4 {

struct ForwardInputs {
  torch::Tensor input_ids;       // int64 [B, S]
  torch::Tensor attention_mask;  // int64 [B, S], 1 real / 0 padding; optional
  torch::Tensor labels;          // int64 [B, S], -100 ignored; optional (no loss without it)
  torch::Tensor position_ids;    // int64 [B, S], the RoPE positions; optional (0..S-1 in every row)
};

struct ForwardOptions {
  KvKeyConvention kv_key = KvKeyConvention::kLayerType;
  std::vector<bool> checkpoint_layers;  // activation checkpointing per layer; empty: none
  bool keep_hidden_states = true;
  bool keep_layer_outputs = false;  // fill attention_outputs and stored_kv (for goldens)
  const LayerOps* ops = nullptr;     // the layers' replaceable ops; nullptr: the reference ones
  const KvHandoffFactory* kv_handoff = nullptr;  // the shared-KV hand-off; nullptr: the reference one
};

struct ForwardOutputs {
  torch::Tensor logits;  // [B, S, V] in the model dtype
  // transformers' output_hidden_states: [0] scaled embeddings, [i] output of layer i-1 for
  // 1 <= i < L, [L] the final-norm output.
  std::vector<torch::Tensor> hidden_states;
  torch::Tensor loss;  // fp32 scalar, when labels were given
  // With keep_layer_outputs: each layer's attention output after o_proj [B, S, H], and the K/V
  // [B, Hkv, S, D] each storing layer hands to the KV-shared layers, by layer index.
  std::vector<torch::Tensor> attention_outputs;
  std::map<int, std::pair<torch::Tensor, torch::Tensor>> stored_kv;
  // With keep_layer_outputs and no checkpointing: each MoE layer's router logits [B * S, E] fp32.
  std::vector<torch::Tensor> router_logits;
};

// One incremental decoding run (Model::start_decode): a cache per layer that computes its own K/V,
// and how many token indices the caches have seen.
struct DecodeState {
  const KvCacheOps* cache_ops = nullptr;
  std::map<int, std::unique_ptr<LayerKvCache>> caches;  // by layer; KV-shared layers have none
  std::map<std::string, int> stored;                    // the KV-sharing key a storing layer wrote -> layer
  std::map<LayerType, RopeTable> rope;                  // tables of `capacity` positions
  int64_t length = 0, capacity = 0, max_rollback = 0;
  int64_t rolled_back = 0;  // indices taken back since the last decode(): at most max_rollback
  KvKeyConvention kv_key = KvKeyConvention::kLayerType;
};

// Per-layer embeddings (GEMMA4.md, Forward 2): [B, S, L, P] from the token ids and the scaled
// embeddings [B, S, H].
torch::Tensor per_layer_inputs(const Config& config, const ModelWeights& weights, const torch::Tensor& input_ids,
                               const torch::Tensor& embeddings, const LayerOps& ops = reference_layer_ops());

class Model {
 public:
  // `weights` must match weight_slots(config); `key_prefix` is how the checkpoint names the text
  // model's root ("model." or "model.language_model.").
  Model(Config config, ModelWeights weights, std::string key_prefix = "model.");

  const Config& config() const { return *config_; }
  const ModelWeights& weights() const { return weights_; }
  torch::ScalarType dtype() const { return weights_.embed_tokens.scalar_type(); }
  torch::Device device() const { return weights_.embed_tokens.device(); }

  // Throws gemma4::Error on inputs that do not fit the model (shape, dtype, token range).
  ForwardOutputs forward(const ForwardInputs& inputs, const ForwardOptions& options = {}) const;

  // Incremental decoding (GEMMA4.md, "Decoding with a cache"): a run over `batch` rows that reaches
  // at most `capacity` token indices, its caches made by `cache_ops` (which must outlive it).
  // max_rollback: the most indices one rollback() may take back (speculative decoding's draft length).
  DecodeState start_decode(int64_t batch, int64_t capacity, const KvCacheOps& cache_ops,
                           KvKeyConvention kv_key = KvKeyConvention::kLayerType, int64_t max_rollback = 0) const;
  // One step: the next c tokens ids [B, c] (int64) at RoPE positions [B, c], with `padding` [B,
  // length + c] (1 token, 0 padding) over every index so far. Returns their logits [B, c, V].
  // Throws gemma4::Error on inputs that do not fit the run.
  torch::Tensor decode(DecodeState& state, const torch::Tensor& ids, const torch::Tensor& positions,
                       const torch::Tensor& padding, const LayerOps* ops = nullptr) const;

  // Speculative decoding: take back the last n token indices (a rejected draft) from every cache;
  // the next decode() starts at state.length - n. Throws gemma4::Error when the cache ops have no
  // rollback or n is out of range.
  void rollback(DecodeState& state, int64_t n) const;
  void set_requires_grad(bool requires_grad);
  // Trainable tensors by checkpoint key ("model.layers.0.mlp.up_proj.weight", "lm_head.weight").
  std::vector<std::pair<std::string, torch::Tensor>> named_trainable_tensors() const;
  std::string checkpoint_key(const std::string& name) const;

  // The two ends of forward, public for measuring them alone (bench/memory): the scaled
  // embeddings [B, S, H] and the per-layer inputs [B, S, L, P] (undefined without PLE) of token
  // ids on the model's device; the LM head and soft-cap of the final norm's output: logits [B, S, V].
  // ops: the backend's (scaled_embedding, logit_softcap); nullptr: the reference ones.
  std::pair<torch::Tensor, torch::Tensor> embed(const torch::Tensor& ids, const LayerOps* ops = nullptr) const;
  torch::Tensor head(const torch::Tensor& normed, const LayerOps* ops = nullptr) const;

 private:
  std::shared_ptr<const Config> config_;  // shared with checkpoint nodes, which may outlive a call
  ModelWeights weights_;
  std::string key_prefix_;
};

}  // namespace gemma4
