#pragma once
// One Gemma-4 decoder layer (GEMMA4.md, Forward 4 and 5), as a pure function of its weights and
// of the tensors that vary per step. Having no hidden state is what makes it safe to checkpoint.
#include <torch/types.h>

#include <vector>

#include "reference/config.h"
#include "reference/weights.h"

namespace gemma4 {

struct LayerInputs {
  torch::Tensor hidden;              // [B, S, H]
  torch::Tensor per_layer_input;     // [B, S, P], or undefined without PLE
  torch::Tensor shared_k, shared_v;  // [B, Hkv, S, D], only for KV-shared layers
  torch::Tensor rope_cos, rope_sin;  // [S, D] of this layer's type
  torch::Tensor mask;                // [B, 1, S, S] additive
};

struct LayerOutputs {
  torch::Tensor hidden;  // [B, S, H]
  torch::Tensor k, v;    // this layer's K/V [B, Hkv, S, D]; defined only when it stores them
};

LayerOutputs decoder_layer(const Config& config, int layer, const LayerWeights& weights, const LayerInputs& in);

// The layer's tensors that need gradient (what a checkpoint must route gradient to).
std::vector<torch::Tensor> trainable_tensors(const Config& config, int layer, const LayerWeights& weights);

}  // namespace gemma4
