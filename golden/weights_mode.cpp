#include "golden/weights_mode.h"

#include "golden/h5_tensors.h"
#include "reference/constructed_weights.h"
#include "reference/error.h"
#include "reference/files.h"
#include "reference/hf_checkpoint.h"

namespace gemma4::golden {

const char* weights_mode_name(WeightsMode mode) {
  switch (mode) {
    case WeightsMode::kStored: return "stored";
    case WeightsMode::kGenerated: return "generated";
    case WeightsMode::kConstructed: return "constructed";
    case WeightsMode::kCheckpoint: return "checkpoint";
  }
  return "?";
}

WeightsMode read_weights_mode(const h5::File& file, const std::string& path, WeightsMode fallback) {
  if (!file.has_attr("/", "weights")) return fallback;
  const std::string name = file.attr_string("/", "weights");
  for (WeightsMode mode :
       {WeightsMode::kStored, WeightsMode::kGenerated, WeightsMode::kConstructed, WeightsMode::kCheckpoint}) {
    if (name != weights_mode_name(mode)) continue;
    if (mode == WeightsMode::kConstructed) {
      if (!file.has_attr("/", "construction")) throw Error(path + ": weights = constructed but no root attribute 'construction'");
      const int64_t version = file.attr_int("/", "construction");
      if (version != kConstruction) {
        throw Error(path + ": made with construction " + std::to_string(version) + ", this build constructs version " +
                    std::to_string(kConstruction) + " (golden/FORMAT.md, \"Constructed weights\"): regenerate the file");
      }
    }
    if (mode == WeightsMode::kCheckpoint) read_checkpoint_dir(file, path);
    return mode;
  }
  throw Error(path + ": root attribute 'weights' is '" + name +
              "', expected 'stored', 'generated', 'constructed' or 'checkpoint'");
}

std::string read_checkpoint_dir(const h5::File& file, const std::string& path) {
  if (!file.has_attr("/", "checkpoint")) throw Error(path + ": weights = checkpoint but no root attribute 'checkpoint'");
  std::string dir = file.attr_string("/", "checkpoint");
  if (!dir.empty() && dir[0] != '/') {
    const size_t slash = path.rfind('/');
    dir = files::join(slash == std::string::npos ? "." : path.substr(0, slash), dir);
  }
  if (!files::is_file(files::join(dir, "config.json"))) {
    throw Error(path + ": its weights are the checkpoint " + dir +
                ", which has no config.json here (the file was made from a checkpoint on another machine?)");
  }
  return dir;
}

void write_weights_mode(h5::File& file, WeightsMode mode, const std::string& checkpoint) {
  file.set_attr("/", "weights", std::string(weights_mode_name(mode)));
  if (mode == WeightsMode::kConstructed) file.set_attr("/", "construction", kConstruction);
  if (mode == WeightsMode::kCheckpoint) file.set_attr("/", "checkpoint", checkpoint);
}

ModelWeights seeded_weights(WeightsMode mode, const Config& config, uint64_t seed, torch::ScalarType dtype,
                            const torch::Device& device) {
  switch (mode) {
    case WeightsMode::kGenerated: return random_weights(config, seed, dtype, device);
    case WeightsMode::kConstructed: return constructed_weights(config, seed, dtype, device);
    case WeightsMode::kStored:
    case WeightsMode::kCheckpoint: break;
  }
  throw Error(std::string("seeded_weights: a case with ") + weights_mode_name(mode) + " weights has no seeded weights");
}

ModelWeights checkpoint_weights(const std::string& dir, const Config& config, torch::ScalarType dtype,
                                const torch::Device& device) {
  Model model = load_model(dir, dtype, device);
  const Config& c = model.config();
  if (c.num_hidden_layers != config.num_hidden_layers || c.hidden_size != config.hidden_size ||
      c.vocab_size != config.vocab_size || c.layer_types != config.layer_types) {
    throw Error("checkpoint " + dir + ": its config (" + std::to_string(c.num_hidden_layers) + " layers, hidden " +
                std::to_string(c.hidden_size) + ", vocabulary " + std::to_string(c.vocab_size) +
                ") is not the golden's: made from another checkpoint");
  }
  return model.weights();
}

}  // namespace gemma4::golden
