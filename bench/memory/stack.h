#pragma once
// The figures of one part in one step, and how the whole stack is combined from its parts
// (ACTIVATION_MEMORY.md, "Combining"): shared by the measurement and the estimate, so that the
// measured stack and the estimated stack are the same sum of different part figures.
#include <cstdint>
#include <map>
#include <optional>

#include "bench/memory/points.h"
#include "reference/config.h"

namespace gemma4::memory {

// What one part allocates in one step, above its baseline: its weights, the gradient buffers of
// its weights and inputs (preallocated, so that backward accumulates into them), and its inputs
// (hidden state, per-layer input, borrowed K/V, RoPE tables, KV cache, upstream gradients).
struct PartFigures {
  // What is still allocated when the part's forward returns: what autograd keeps for backward and
  // what the part hands on (its output hidden; its K/V when it stores them for KV-shared layers).
  double retained = 0;
  double peak = 0;  // the most allocated at any moment of the step (forward and, in training, backward)
};

struct StepShape {
  int64_t tokens = 0;   // train, prefill: the sequence length; decode: 1 token per sequence
  int64_t batch = 1;    // sequences
  int64_t context = 0;  // decode: cache entries before the new token
};

// The layer that stands for `part` in the config (the first layer of that kind); nullopt when the
// config has none (kv-shared parts of a model without KV sharing). Not for kStack or kEdges.
std::optional<int> layer_of_part(const Config& config, Part part);
// The part (kind) of layer `layer`.
Part part_of_layer(const Config& config, int layer);
// The head dim of the config's layers of `type` (RoPE tables are per type); 0 when it has none.
int64_t head_dim_of(const Config& config, LayerType type);

// The whole stack in `phase` from the figures of every part the config has (ACTIVATION_MEMORY.md,
// "Combining"); throws gemma4::Error naming a missing part.
double combine_stack(const Config& config, Phase phase, const StepShape& shape, int64_t element_bytes,
                     const std::map<Part, PartFigures>& parts);

}  // namespace gemma4::memory
