#include "golden/weights_mode.h"

#include "golden/h5_tensors.h"
#include "reference/constructed_weights.h"
#include "reference/error.h"

namespace gemma4::golden {

const char* weights_mode_name(WeightsMode mode) {
  switch (mode) {
    case WeightsMode::kStored: return "stored";
    case WeightsMode::kGenerated: return "generated";
    case WeightsMode::kConstructed: return "constructed";
  }
  return "?";
}

WeightsMode read_weights_mode(const h5::File& file, const std::string& path, WeightsMode fallback) {
  if (!file.has_attr("/", "weights")) return fallback;
  const std::string name = file.attr_string("/", "weights");
  for (WeightsMode mode : {WeightsMode::kStored, WeightsMode::kGenerated, WeightsMode::kConstructed}) {
    if (name != weights_mode_name(mode)) continue;
    if (mode == WeightsMode::kConstructed) {
      if (!file.has_attr("/", "construction")) throw Error(path + ": weights = constructed but no root attribute 'construction'");
      const int64_t version = file.attr_int("/", "construction");
      if (version != kConstruction) {
        throw Error(path + ": made with construction " + std::to_string(version) + ", this build constructs version " +
                    std::to_string(kConstruction) + " (golden/FORMAT.md, \"Constructed weights\"): regenerate the file");
      }
    }
    return mode;
  }
  throw Error(path + ": root attribute 'weights' is '" + name + "', expected 'stored', 'generated' or 'constructed'");
}

void write_weights_mode(h5::File& file, WeightsMode mode) {
  file.set_attr("/", "weights", std::string(weights_mode_name(mode)));
  if (mode == WeightsMode::kConstructed) file.set_attr("/", "construction", kConstruction);
}

ModelWeights seeded_weights(WeightsMode mode, const Config& config, uint64_t seed, torch::ScalarType dtype,
                            const torch::Device& device) {
  switch (mode) {
    case WeightsMode::kGenerated: return random_weights(config, seed, dtype, device);
    case WeightsMode::kConstructed: return constructed_weights(config, seed, dtype, device);
    case WeightsMode::kStored: break;
  }
  throw Error("seeded_weights: a stored case's weights are in its file");
}

}  // namespace gemma4::golden
