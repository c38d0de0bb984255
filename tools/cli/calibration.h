#pragma once
// `gemma4-conform calibrate`: the suite run over every legitimate implementation (the reference,
// the fused backend, the variants) and every faulty backend, and the separation between them:
// per dtype and category, how close correct code came to the bounds and how far the weakest bug
// went past them (golden/FORMAT.md, "Separation").
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "conformance/check.h"
#include "impl/backend.h"
#include "tools/cli/child_processes.h"

namespace gemma4::cli {

// A CPU instruction-set level to run at: the most oneDNN may use and ATen's kernel dispatch level,
// so that a run stands for a CPU of that kind (oneDNN rounds differently on each).
struct IsaLevel {
  std::string name;                         // "native", "AVX2", "AVX512_CORE_BF16", ...
  std::map<std::string, std::string> env;   // ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY
};
std::vector<IsaLevel> isa_levels_offered();  // from /proc/cpuinfo, lowest first, "native" last
// "native" alone, or the named levels ("auto": every level this CPU offers). Throws UsageError-like
// gemma4::Error naming an unknown or unavailable level.
std::vector<IsaLevel> parse_isa_levels(const std::string& list);

enum class Expectation {
  kPass,           // legitimate: the whole suite passes
  kFail,           // faulty: at least one failing result in each category it declares
  kMayPass,        // faulty and below bf16/f16 resolution, run in bf16/f16: reported, not judged
};
const char* expectation_name(Expectation e);  // "pass", "fail", "may pass"

struct CalibrationRun {
  const impl::Backend* backend = nullptr;
  std::string dtype;  // f32 | bf16 | f16
  IsaLevel isa;
  Expectation expect = Expectation::kPass;
  ChildJob job;
  // Filled after the run.
  ChildResult child;
  nlohmann::json report;   // the conform --report JSON; null when none was written
  bool as_expected = false;
  std::string finding;     // one line: what happened against what was expected
};

// A backend to calibrate and how `conform` selects it: {"--backend", name} or {"--backend-lib", path}.
struct Subject {
  const impl::Backend* backend;
  std::vector<std::string> select;
};
// The in-tree backends of kinds reference, fused, variant and faulty whose name matches `filter`.
std::vector<Subject> builtin_subjects(const std::string& filter);

// One run per subject, dtype and ISA level (CPU; on CUDA only "native"). A faulty backend runs only
// the categories where its bug must show; a plugin is held to its declared kind like any backend.
std::vector<CalibrationRun> plan_runs(const std::vector<Subject>& subjects, const std::vector<std::string>& dtypes,
                                      const std::vector<IsaLevel>& isas, const std::string& device,
                                      const std::string& work_dir);
// Reads the run's report and decides `as_expected` and `finding`.
void judge_run(CalibrationRun& run);

// Per dtype and category: the worst legitimate ratio (error / bound) and the weakest faulty one.
struct Separation {
  std::string dtype;
  conformance::Category category;
  double worst_legitimate = 0;  // max over legitimate runs and results; 0 when no result
  std::string worst_legitimate_at;
  double weakest_faulty = 0;    // min over faulty backends (expected to fail here) of their largest ratio
  std::string weakest_faulty_by;
  int faulty_backends = 0;      // how many faulty backends declare this category
  bool separated() const;       // worst legitimate <= 1 < weakest faulty (or no faulty backend)
};
std::vector<Separation> separation_table(const std::vector<CalibrationRun>& runs);

// Each faulty backend's largest ratio in its categories, per dtype: how far its bug goes.
struct FaultyStrength {
  std::string backend, dtype;
  double ratio = 0;
  std::string at;  // the result that set it
};
std::vector<FaultyStrength> faulty_strengths(const std::vector<CalibrationRun>& runs);

nlohmann::json calibration_json(const std::vector<CalibrationRun>& runs, const std::vector<Separation>& table,
                                const std::vector<FaultyStrength>& strengths);

}  // namespace gemma4::cli
