#pragma once
// The memory-flatness rule, written once. Training with activation checkpointing and shared KV must
// not grow memory from step to step (GEMMA4.md, "Known failure modes": a container of K/V tensors
// captured by a checkpoint closure kept every step's K/V alive, +0.47 GiB/step, OOM at step 73 on
// Gemma-4 31B). Three callers measure and this module judges: the suite's memory_flatness
// (conformance/checks_memory_flatness.cpp), conform-model's (gemma4_conform/model_memory.py) and
// conform-model --distributed's, per rank (gemma4_conform/model_distributed.py), the last two
// through gemma4_conform._core.
//
// The rule: N training steps (default 50 on the CPU, 200 on CUDA), the live bytes read after each
// one once its graph and gradients are gone; the first max(3, N/10) steps are warm-up (they
// allocate lazily created state) and as many again at the end are witnesses only. For each step
// judged, its floor is the least live bytes read at that step or any later one: what a step retains
// is still live at every later reading, so a leak raises the floor, while a buffer that happens to
// be alive at one reading (a communication or autograd thread's, seen as 12-94 KB spikes on gloo
// ranks) is gone at the next and leaves the floor alone. The least-squares slope of the floor
// against the step index must stay under 1% of one step's shared K/V (the K and V every storing
// layer hands to the KV-shared layers, summed). A leak of the kind above retains at least one
// step's shared K/V per step, a slope of >= 100% of it; an honest implementation allocates the
// same bytes every step, a slope of 0.
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "conformance/report.h"
#include "reference/config.h"

namespace gemma4::conformance {

struct FlatnessRule {
  static constexpr double kBoundFraction = 0.01;  // of one step's shared K/V
  static constexpr int kMinWarmup = 3;
  static constexpr int kMinMeasured = 3;          // steps judged, at least, between warm-up and witnesses
  static int default_steps(bool cuda) { return cuda ? 200 : 50; }
  static int warmup(int steps) { return std::max(kMinWarmup, steps / 10); }
  static int witnesses(int steps) { return warmup(steps); }  // the last steps: read, not judged
  // Throws gemma4::Error "memory_flatness needs at least M steps (--steps N)" when N is too few.
  static void require_steps(int steps);
};

// One step's K/V of layer `layer` (K and V of [batch, kv heads, seq, head dim] in `dtype`), as the
// config resolves its geometry.
int64_t layer_kv_bytes(const Config& config, int layer, int64_t batch, int64_t seq, torch::ScalarType dtype);
// One step's shared K/V: the K/V of every layer some KV-shared layer reads (its kv_source); 0 when
// the config shares none.
int64_t shared_kv_bytes(const Config& config, int64_t batch, int64_t seq, torch::ScalarType dtype);

// Judges the live bytes read after each of N steps (warm-up included: the rule skips it) against
// one step's K/V (`kv_bytes`, described in the detail as `kv_about`). The row: case "live bytes
// after each step", metric slope_bytes_per_step, the floor's slope as value, 1% of kv_bytes as
// bound, pass when the slope is below it; the detail gives N, the steps fitted, the first and last
// floors, the range of the live bytes read over the judged steps and the K/V. Test and category
// are left to the caller. Throws gemma4::Error for too few steps or kv_bytes <= 0.
Result judge_flatness(const std::vector<int64_t>& live_bytes_per_step, double kv_bytes,
                      const std::string& kv_about = "one step's shared K/V");

}  // namespace gemma4::conformance
