#pragma once
// Activation-memory points (bench/memory/ACTIVATION_MEMORY.md): what `gemma4-conform memory
// measure` writes and `memory report` and the committed-points test read. One point is one
// measured peak of one part of a released geometry in one phase, for one backend, beside the
// closed-form estimate (activation_estimate.h) of the same point.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reference/config.h"

namespace gemma4::memory {

enum class Phase {
  kTrain,              // forward + backward, every activation kept for backward
  kTrainCheckpointed,  // forward + backward, each decoder layer checkpointed (recomputed in backward)
  kPrefill,            // one forward over the prompt without autograd; logits of the last position only
  kDecode,             // one step of one new token per sequence against a filled KV cache
};
enum class Part {
  kStack,            // the whole model as a planner sums it (ACTIVATION_MEMORY.md, "Combining")
  kSliding,          // one sliding decoder layer with its own K/V
  kGlobal,           // one global decoder layer with its own K/V
  kSlidingKvShared,  // one sliding layer that reads another layer's K/V
  kGlobalKvShared,   // one global layer that reads another layer's K/V
  kEdges,            // embeddings (with per-layer inputs), final norm, LM head, soft-cap and loss
  kWhole,            // the whole model run directly where it fits: checks the stack's combination
};
const std::vector<Phase>& all_phases();
const std::vector<Part>& all_parts();
bool is_training(Phase phase);        // kTrain or kTrainCheckpointed
std::string phase_name(Phase phase);  // "train", "train_checkpointed", "prefill", "decode"
std::string part_name(
    Part part);  // "stack", "sliding", "global", "sliding_kv_shared", "global_kv_shared", "edges", "whole"
Phase parse_phase(const std::string& name);  // throws gemma4::Error naming the bad value
Part parse_part(const std::string& name);

struct MemoryPoint {
  std::string geometry;  // "31b", "26b-a4b", "e2b", "e4b"
  Part part = Part::kStack;
  Phase phase = Phase::kTrain;
  std::string backend;  // "reference", "cuda"
  int64_t tokens = 0;   // tokens in the step: the sequence length (train, prefill), or batch (decode)
  int64_t batch = 1;    // sequences in the step
  int64_t context = 0;  // decode: cache entries each sequence attends to besides the new token; else 0
  double measured_bytes = 0, estimate_bytes = 0;
  double ratio() const { return measured_bytes / estimate_bytes; }
  std::string name() const;  // "31b/stack/train/cuda/T=8192/B=1"
};

// A point that was asked for and not measured, with why ("out of memory: ...", "needs 170 GiB,
// 139 GiB free").
struct SkippedPoint {
  MemoryPoint point;  // measured_bytes 0
  std::string reason;
};

struct MemoryFile {
  std::string device;     // "NVIDIA H200"
  std::string generator;  // "gemma4-conform memory <git sha>"
  std::string torch_version;
  std::string dtype = "bf16";
  // The smallest factor (rounded up to 0.01) with measured <= estimate x factor at every point.
  double safety_factor = 0;
  std::vector<MemoryPoint> points;
  std::vector<SkippedPoint> skipped;
};

// The smallest safety factor, rounded up to the next 0.01, that covers every point (0 for none).
double covering_factor(const std::vector<MemoryPoint>& points);

// JSON (ACTIVATION_MEMORY.md, "File"): throws gemma4::Error naming the file and the bad field.
MemoryFile read_memory_file(const std::string& path);
void write_memory_file(const std::string& path, const MemoryFile& file);

// The released geometries by the names the points use, from reference/configs.
const std::map<std::string, Config>& released_geometries();

}  // namespace gemma4::memory
