#pragma once
// The measurement sweep behind `gemma4-conform memory measure` (ACTIVATION_MEMORY.md): every
// geometry x backend x phase x step shape; each part measured where its estimate says it fits,
// the stack combined from the parts as a planner sums it, and the whole model run directly where
// asked. And the two steps of `memory report` that are not printing: merging points files and
// re-estimating them with this build's closed form.
#include <torch/types.h>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "bench/memory/points.h"
#include "impl/backend.h"

namespace gemma4::memory {

struct SweepPlan {
  std::vector<std::string> geometries;  // names of released_geometries()
  std::vector<const impl::Backend*> backends;
  std::vector<Phase> phases;
  std::vector<int64_t> train_tokens;    // sequence lengths of the training phases
  std::vector<int64_t> prefill_tokens;  // prompt lengths of prefill
  std::vector<int64_t> decode_batches;  // batch sizes of decode
  int64_t context = 4096;               // decode: cache entries each sequence has before its new token
  std::vector<std::string> whole;       // geometries whose whole model is also run directly
};

// Runs the plan on `device` in `dtype`, one progress line per point on `progress`. Fills the
// file's device, points, skipped points (with why) and covering safety factor; the caller names
// the generator, torch version and dtype.
MemoryFile run_sweep(const SweepPlan& plan, const torch::Device& device, torch::ScalarType dtype,
                     std::ostream& progress);

// Several points files of one device and dtype (one measure run per geometry) as one; the safety
// factor the largest of theirs. Throws gemma4::Error naming the file that does not match.
MemoryFile merge_memory_files(const std::vector<std::string>& paths);

// Every point's estimate recomputed with this build's closed form and the covering factor with
// them. Throws gemma4::Error naming `path` and the point of an unknown geometry.
void reestimate(MemoryFile& file, const std::string& path);

}  // namespace gemma4::memory
