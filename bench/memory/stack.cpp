#include "bench/memory/stack.h"

#include <algorithm>

#include "reference/error.h"

namespace gemma4::memory {

std::optional<int> layer_of_part(const Config& c, Part part) {
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (part_of_layer(c, l) == part) return l;
  }
  return std::nullopt;
}

int64_t head_dim_of(const Config& c, LayerType type) {
  for (const LayerSpec& spec : c.layers) {
    if (spec.type == type) return spec.head_dim;
  }
  return 0;
}

Part part_of_layer(const Config& c, int layer) {
  const LayerSpec& spec = c.layers[layer];
  if (spec.type == LayerType::kSliding) return spec.kv_shared ? Part::kSlidingKvShared : Part::kSliding;
  return spec.kv_shared ? Part::kGlobalKvShared : Part::kGlobal;
}

double combine_stack(const Config& c, Phase phase, const StepShape& shape, int64_t element_bytes,
                     const std::map<Part, PartFigures>& parts) {
  const auto figures = [&parts](Part part) -> const PartFigures& {
    const auto it = parts.find(part);
    if (it == parts.end()) throw Error("the stack needs the " + part_name(part) + " part, which was not measured");
    return it->second;
  };
  const PartFigures& edges = figures(Part::kEdges);
  if (is_training(phase)) {
    // Every part's forward has run before the first backward: all retained bytes are alive, and
    // while one part runs its backward it adds its own transient (peak - retained) on top.
    double retained = edges.retained, transient = edges.peak - edges.retained;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const PartFigures& f = figures(part_of_layer(c, l));
      retained += f.retained;
      transient = std::max(transient, f.peak - f.retained);
    }
    // The representative layer of a kind may not be the one that stores K/V for KV-shared
    // layers; the stored K/V stay alive until backward (a checkpointed layer keeps only them and
    // its output). Counted for every storing layer whose representative did not store.
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const LayerSpec& spec = c.layers[l];
      if (!spec.stores_kv || c.layers[*layer_of_part(c, part_of_layer(c, l))].stores_kv) continue;
      retained += 2.0 * shape.batch * shape.tokens * spec.num_kv_heads * spec.head_dim * element_bytes;
    }
    return retained + transient;
  }
  // Serving: layers run one after another without autograd; the embeddings' outputs stay alive
  // under them (retained), one layer at a time adds its peak.
  double layers = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) layers = std::max(layers, figures(part_of_layer(c, l)).peak);
  return std::max(edges.peak, edges.retained + layers);
}

}  // namespace gemma4::memory
