#pragma once
// Loading a Hugging Face Gemma-4 checkpoint directory: config.json plus model.safetensors or a
// sharded set with model.safetensors.index.json. Both key layouts are accepted:
// Gemma4ForCausalLM ("model.layers.N...") and Gemma4ForConditionalGeneration
// ("model.language_model.layers.N..."; tensors of other modalities are skipped).
#include <torch/types.h>

#include <string>

#include "reference/model.h"

namespace gemma4 {

// Throws gemma4::Error listing missing keys, unexpected keys and shape mismatches together, or
// naming the damaged file.
Model load_model(const std::string& dir, torch::ScalarType dtype, const torch::Device& device);

}  // namespace gemma4
