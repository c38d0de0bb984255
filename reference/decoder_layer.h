#pragma once
// One Gemma-4 decoder layer (GEMMA4.md, Forward 4 and 5), as a pure function of its weights and
// of the tensors that vary per step. Having no hidden state is what makes it safe to checkpoint.
#include <torch/types.h>

#include <vector>

#include "reference/config.h"
#include "reference/kv_cache.h"
#include "reference/layer_ops.h"
#include "reference/weights.h"

namespace gemma4 {

struct LayerInputs {
  torch::Tensor hidden;              // [B, S, H]
  torch::Tensor per_layer_input;     // [B, S, P], or undefined without PLE
  torch::Tensor shared_k, shared_v;  // [B, Hkv, S, D], only for KV-shared layers
  torch::Tensor rope_cos, rope_sin;  // [T, D] of this layer's type (RopeTable)
  torch::Tensor padding;             // [B, S] int64 attention_mask (1 token, 0 padding), or undefined
  torch::Tensor rope_positions;      // [B, S] int64 (RopeTable::positions), or undefined: 0..S-1
  torch::Tensor segments;            // [B, S] int64 packed sequences (AttentionSpec::segments), or undefined

  // Decoding with a cache (reference/kv_cache.h), else null: the layer's own cache, which it
  // updates with this step's K/V, or on a KV-shared layer its source layer's, which it only reads.
  // Attention then runs against the cache, not over this step's K/V alone; `padding` covers every
  // token index so far and `cache_start` is the index of the step's first token.
  LayerKvCache* cache = nullptr;
  const KvCacheOps* cache_ops = nullptr;
  int64_t cache_start = 0;
};

struct LayerOutputs {
  torch::Tensor hidden;     // [B, S, H]
  torch::Tensor attention;  // [B, S, H]: the attention block's output after o_proj, before its norm
  torch::Tensor k, v;    // this layer's K/V [B, Hkv, S, D]; undefined on KV-shared layers (they borrow)
  torch::Tensor router_logits;  // MoE layers: [B * S, E] fp32, what the router's softmax reads
};

// Every replaceable op goes through `ops` (reference/layer_ops.h).
LayerOutputs decoder_layer(const Config& config, int layer, const LayerWeights& weights, const LayerInputs& in,
                           const LayerOps& ops = reference_layer_ops());

// The parts of a layer that are more than one primitive (GEMMA4.md, Forward 4), for op-level
// goldens and backends.
torch::Tensor mlp(const MlpWeights& weights, const torch::Tensor& x, const LayerOps& ops = reference_layer_ops());  // GeGLU: down(gelu_tanh(gate x) * up x)
// The MoE branch from the residual stream: router, top-k experts, its own norms. router_logits:
// where to put the router's logits [B * S, E] fp32, when wanted.
torch::Tensor moe(const Config& config, const MoeWeights& weights, const torch::Tensor& residual,
                  const LayerOps& ops = reference_layer_ops(),
                  torch::Tensor* router_logits = nullptr);
// The gated per-layer-input branch added to the layer output when PLE is on.
torch::Tensor per_layer_input_branch(const Config& config, const LayerWeights& weights, const torch::Tensor& hidden,
                                     const torch::Tensor& per_layer_input, const LayerOps& ops = reference_layer_ops());

// The layer's tensors that need gradient (what a checkpoint must route gradient to).
std::vector<torch::Tensor> trainable_tensors(const Config& config, int layer, const LayerWeights& weights);

}  // namespace gemma4
