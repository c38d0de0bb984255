#pragma once
// Where a model or layer golden's weights come from: root attribute `weights` (golden/FORMAT.md).
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "reference/config.h"
#include "reference/weights.h"

namespace gemma4::h5 {
class File;
}

namespace gemma4::golden {

enum class WeightsMode {
  kStored,       // the file's weights/ group (or, for a decode golden, the checkpoint beside it)
  kGenerated,    // the counter generator's values for the file's seed (reference/weights.h)
  kConstructed,  // the trained-like construction for the file's seed (reference/constructed_weights.h)
  kCheckpoint,   // a Hugging Face checkpoint directory on this machine, named by root attribute `checkpoint`
};
const char* weights_mode_name(WeightsMode mode);  // "stored", "generated", "constructed", "checkpoint"

// The root attribute `weights` of an open file (`fallback` when it has none), checked: a constructed
// file must name this build's construction (attribute `construction`), a checkpoint file its
// directory (attribute `checkpoint`). Errors name `path`.
WeightsMode read_weights_mode(const h5::File& file, const std::string& path, WeightsMode fallback);
// Root attribute `checkpoint` of a file with weights = checkpoint, resolved against the file's own
// directory when relative; throws naming `path` when the directory has no config.json.
std::string read_checkpoint_dir(const h5::File& file, const std::string& path);
// Writes `weights` (and `construction` for constructed weights, `checkpoint` for a checkpoint).
void write_weights_mode(h5::File& file, WeightsMode mode, const std::string& checkpoint = "");

// The weights of a generated or constructed case, rounded to `dtype`, on `device`.
ModelWeights seeded_weights(WeightsMode mode, const Config& config, uint64_t seed, torch::ScalarType dtype,
                            const torch::Device& device);
// The text model's weights of a Hugging Face checkpoint directory; throws when its config differs
// from `config` in the geometry (the golden was made from another checkpoint).
ModelWeights checkpoint_weights(const std::string& dir, const Config& config, torch::ScalarType dtype,
                                const torch::Device& device);

}  // namespace gemma4::golden
