#pragma once
// What a model golden's model does with its inputs: how its attention spreads over the keys, and
// whether bf16 stays with fp32 over depth (golden/FORMAT.md, "Constructed weights": the criteria a
// real-size golden must meet). `gemma4-conform golden inspect` prints it.
#include <torch/types.h>

#include <string>
#include <vector>

#include "golden/golden_file.h"
#include "reference/config.h"

namespace gemma4::golden {

// One layer's attention in fp32, averaged over heads and over the query rows that see a key.
struct AttentionStatistics {
  int layer = 0;
  LayerType type = LayerType::kSliding;
  double entropy = 0;             // nats
  double normalized_entropy = 0;  // entropy / log(keys the row sees); rows seeing one key left out
  double first_key_mass = 0;      // on the first key the row sees: the sequence's first token (a sink)
  // On keys `sliding_window` or more tokens back, over the rows that have such keys (global
  // layers; NaN when no row has one).
  double beyond_window_mass = 0;
};

struct ModelStatistics {
  std::vector<AttentionStatistics> layers;  // one per layer
  // cos(bf16 run, fp32 run) of each hidden state (transformers' output_hidden_states: [0] the
  // embeddings ... [L] the final norm), averaged over real tokens; both runs on the weights
  // rounded to bf16, the fp32 one computing in fp32.
  std::vector<double> bf16_cosine;
  double loss = 0;       // fp32 run, the golden's labels
  double log_vocab = 0;  // log V: the loss of a uniform guess
};

// The criteria of a trained-like model (FORMAT.md), each with its value and bound.
struct Criterion {
  std::string name;
  double value = 0, low = 0, high = 0;
  bool met() const { return value >= low && value <= high; }
};
std::vector<Criterion> trained_like_criteria(const ModelStatistics& s);

// Runs the golden's model (stored, generated or constructed weights) on its inputs on `device`.
ModelStatistics model_statistics(const GoldenCase& golden, const torch::Device& device);

}  // namespace gemma4::golden
