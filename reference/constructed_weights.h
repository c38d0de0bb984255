#pragma once
// Constructed weights: a Gemma-4 whose attention (sink, local and retrieval heads at moderate
// entropy) and residual stream behave like a trained model's, recreated bit for bit from the
// counter generator on any machine (golden/FORMAT.md, "Constructed weights"). The real-size goldens
// use them: random weights attend to one key per query and hide every bug that needs many
// comparable keys, an attention sink or a distant token. golden/generators/constructed_weights.py is
// the NumPy half; the two agree in every bit (CTest constructed_weights_match).
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "reference/config.h"
#include "reference/weights.h"

namespace gemma4 {

// The construction's version: root attribute `construction` of a golden with weights = constructed.
constexpr int64_t kConstruction = 2;
// The token the construction's BOS direction belongs to (Gemma's bos_token_id): the inputs of a
// constructed golden put it at every sequence start, where the sink heads find it.
constexpr int64_t kConstructedBosId = 2;

// One weight in fp32 on the CPU, by its slot name (weights.h) and shape.
torch::Tensor constructed_weight(const Config& config, const std::string& name, at::IntArrayRef shape, uint64_t seed);
ModelWeights constructed_weights(const Config& config, uint64_t seed, torch::ScalarType dtype, const torch::Device& device);

}  // namespace gemma4
