// The committed activation-memory points (bench/memory/nvidia-h200.json, measured on the GPU host)
// against this build's closed-form estimate: every point within estimate x the file's safety
// factor, the file in step with the code, the factor the smallest that covers (not loosened), the
// whole model measured directly within the stack as combined from its parts. Negative controls: a
// fused backend that silently keeps the reference's eager attention, a planner that reads a quarter
// of the vocabulary, and a file whose points grew past the factor all fail. On the CPU, the tiny
// E2B miniature measured part by part and whole, so the measurement itself runs in CI.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "bench/memory/activation_estimate.h"
#include "bench/memory/measure.h"
#include "bench/memory/points.h"
#include "golden/data_dir.h"
#include "golden/model_cases.h"
#include "impl/backend.h"

namespace gemma4::memory {
namespace {

MemoryFile committed() { return read_memory_file(golden::data_dir() + "/bench/memory/nvidia-h200.json"); }

// The points above estimate x factor, the estimate recomputed from `geometries`.
std::vector<std::string> above(const MemoryFile& file, const std::map<std::string, Config>& geometries) {
  std::vector<std::string> out;
  for (const MemoryPoint& p : file.points) {
    if (p.measured_bytes > estimate_bytes(geometries.at(p.geometry), p) * file.safety_factor) out.push_back(p.name());
  }
  return out;
}

TEST(CommittedPoints, EveryPointWithinEstimateTimesFactor) {
  const MemoryFile file = committed();
  ASSERT_GE(file.points.size(), 1000u) << "every geometry, phase and backend";
  EXPECT_EQ(file.device, "NVIDIA H200");
  EXPECT_EQ(file.dtype, "bf16");
  const std::vector<std::string> bad = above(file, released_geometries());
  EXPECT_TRUE(bad.empty()) << bad.size() << " points above the estimate x " << file.safety_factor << ", first "
                           << bad.front();
}

TEST(CommittedPoints, FileMatchesThisBuildsEstimateAndTheFactorIsTight) {
  const MemoryFile file = committed();
  for (const MemoryPoint& p : file.points) {
    const double mine = estimate_bytes(released_geometries().at(p.geometry), p);
    ASSERT_NEAR(p.estimate_bytes, mine, 1e-9 * mine) << p.name() << ": re-estimate the file (memory report --json)";
  }
  // Not loosened: the smallest factor (to 0.01) that covers every point, and it says something.
  EXPECT_DOUBLE_EQ(file.safety_factor, covering_factor(file.points));
  EXPECT_LT(file.safety_factor, 1.5);
}

TEST(CommittedPoints, EveryGeometryPhaseAndBackendMeasured) {
  const MemoryFile file = committed();
  for (const auto& [geometry, config] : released_geometries()) {
    for (Phase phase : all_phases()) {
      for (const std::string backend : {"reference", "cuda"}) {
        const bool stack = std::any_of(file.points.begin(), file.points.end(), [&](const MemoryPoint& p) {
          return p.geometry == geometry && p.phase == phase && p.backend == backend && p.part == Part::kStack;
        });
        EXPECT_TRUE(stack) << geometry << " " << phase_name(phase) << " " << backend;
      }
    }
  }
}

// The stack is combined from parts measured alone; where the whole model fits it was also run
// directly. The combination may overcount (it adds each part's worst moment to every retained byte; at 1k
// tokens of E4B by a quarter) but must not miss.
TEST(CommittedPoints, WholeModelWithinTheCombinedStack) {
  const MemoryFile file = committed();
  int checked = 0;
  for (const MemoryPoint& whole : file.points) {
    if (whole.part != Part::kWhole) continue;
    for (const MemoryPoint& stack : file.points) {
      if (stack.part == Part::kStack && stack.geometry == whole.geometry && stack.phase == whole.phase &&
          stack.backend == whole.backend && stack.tokens == whole.tokens && stack.batch == whole.batch) {
        // 1 MiB: the step's own small tensors (ids, positions, masks) that no part holds.
        EXPECT_LE(whole.measured_bytes, stack.measured_bytes * 1.02 + (1 << 20)) << whole.name();
        EXPECT_GE(whole.measured_bytes, stack.measured_bytes * 0.75) << whole.name();
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 40);
}

// Negative control: a fused backend that falls back to eager attention (scores [B, Hq, S, S]) at
// long S, e.g. for a head dim its kernel lacks. Its points are the reference's, labelled cuda.
TEST(NegativeControls, FusedBackendKeepingEagerScoresFails) {
  MemoryFile file = committed();
  std::vector<MemoryPoint> relabelled;
  for (MemoryPoint p : file.points) {
    if (p.backend != "reference" || p.part == Part::kEdges) continue;
    p.backend = "cuda";
    relabelled.push_back(p);
  }
  file.points = relabelled;
  const std::vector<std::string> bad = above(file, released_geometries());
  EXPECT_GE(bad.size(), 50u);
  const bool long_prefill = std::any_of(bad.begin(), bad.end(), [](const std::string& n) {
    return n.find("/stack/prefill/cuda/T=16384") != std::string::npos;
  });
  EXPECT_TRUE(long_prefill);
}

// Negative control: a planner that reads a quarter of the vocabulary (the LM head and loss are
// [T, V]): training points of the edges and the stack exceed the envelope.
TEST(NegativeControls, EstimateWithTooSmallVocabularyFails) {
  std::map<std::string, Config> wrong = released_geometries();
  for (auto& [name, config] : wrong) config.vocab_size /= 4;
  const std::vector<std::string> bad = above(committed(), wrong);
  const bool train_stack = std::any_of(
      bad.begin(), bad.end(), [](const std::string& n) { return n.find("/stack/train/") != std::string::npos; });
  EXPECT_TRUE(train_stack) << bad.size() << " points above";
}

// Negative control: every point grown by 2% (more than the factor's rounding to 0.01) fails at the
// tightest point; the file as committed passes (the first test).
TEST(NegativeControls, GrownPointsFail) {
  MemoryFile file = committed();
  for (MemoryPoint& p : file.points) p.measured_bytes *= 1.02;
  EXPECT_FALSE(above(file, released_geometries()).empty());
}

// The measurement itself, on the CPU (tracking allocator) with the tiny E2B miniature in f32: every
// part in training with checkpointing and in decode, their combination, and the whole model run
// directly, which the combination must bound.
TEST(CpuMeasurement, TinyE2bPartsCombineToBoundTheWholeModel) {
  const golden::ModelCase* e2b = nullptr;
  for (const golden::ModelCase& mc : golden::model_cases()) {
    if (mc.name == "e2b") e2b = &mc;
  }
  ASSERT_NE(e2b, nullptr);
  const Config c = parse_config(golden::tiny_config(*e2b, golden::released_configs_dir()));
  const impl::Backend& reference = impl::find_backend("reference");
  for (Phase phase : {Phase::kTrainCheckpointed, Phase::kTrain, Phase::kDecode}) {
    const StepShape shape = phase == Phase::kDecode ? StepShape{1, 3, 40} : StepShape{64, 2, 0};
    std::map<Part, PartFigures> parts;
    for (Part part : {Part::kEdges, Part::kSliding, Part::kGlobal, Part::kSlidingKvShared, Part::kGlobalKvShared}) {
      if (part != Part::kEdges && !layer_of_part(c, part)) continue;
      parts[part] = measure_part(c, part, phase, shape, reference, torch::kCPU, torch::kFloat32);
      EXPECT_GT(parts[part].peak, 0) << phase_name(phase) << " " << part_name(part);
      EXPECT_GE(parts[part].peak, parts[part].retained) << phase_name(phase) << " " << part_name(part);
    }
    const double stack = combine_stack(c, phase, shape, 4, parts);
    const PartFigures whole = measure_part(c, Part::kWhole, phase, shape, reference, torch::kCPU, torch::kFloat32);
    EXPECT_LE(whole.peak, stack * 1.02) << phase_name(phase);
    EXPECT_GE(whole.peak, stack * 0.5) << phase_name(phase);
  }
}

}  // namespace
}  // namespace gemma4::memory
