#pragma once
// How the K/V of a storing layer reach the KV-shared layers that borrow them (GEMMA4.md, "KV
// sharing" and "Known failure modes"). The reference hands them over through a store local to
// one forward call, as tensor inputs of each borrowing layer, so that activation checkpointing
// sees them as inputs and nothing outlives the call. A backend may replace the hand-off (impl/);
// the faulty backends do, to reproduce the side channels and closures that broke real trainers.
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>

#include "reference/config.h"

namespace gemma4 {

struct SharedKv {
  torch::Tensor k, v;  // [B, Hkv, S, D]
};

// One per forward call.
class KvHandoff {
 public:
  virtual ~KvHandoff() = default;
  // After storing layer `layer` ran: its K/V under `key` (the convention's write key).
  virtual void store(int layer, const std::string& key, const SharedKv& kv) = 0;
  // Before KV-shared layer `layer` runs: the K/V it receives as tensor inputs (they cross a
  // checkpoint boundary as inputs). Throws gemma4::Error when nothing was stored under `key`.
  virtual SharedKv inputs_for(int layer, const std::string& key) = 0;
  // Optionally, a function run inside the layer (and again when a checkpoint recomputes it, on
  // whichever thread autograd uses) that turns the inputs into the K/V attention reads. The
  // reference needs none: what arrives as inputs is what attention reads.
  using InLayer = std::function<SharedKv(const SharedKv& inputs)>;
  virtual InLayer in_layer(int /*layer*/, const std::string& /*key*/) { return {}; }
};

// Makes the hand-off of one forward call of a model with `config`.
using KvHandoffFactory = std::function<std::unique_ptr<KvHandoff>(const Config& config)>;

// The reference: a map that lives as long as the forward call.
std::unique_ptr<KvHandoff> local_kv_handoff(const Config& config);

}  // namespace gemma4
