#pragma once
// Calibration: the suite run over every legitimate implementation (the reference, the fused
// backend, the variants) and every faulty backend, each held to what its kind declares, and the
// separation between them: per dtype and category, how close correct code came to the bounds and
// how far the weakest bug went past them (golden/FORMAT.md, "Separation"). `gemma4-conform
// calibrate` and `conform --backend REGEX|all` both judge runs here.
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "conformance/check.h"
#include "conformance/child_processes.h"
#include "impl/backend.h"

namespace gemma4::conformance {

// A CPU instruction-set level to run at: the most oneDNN may use and ATen's kernel dispatch level,
// so that a run stands for a CPU of that kind (oneDNN rounds differently on each). Both are read
// once per process, so a level other than "native" runs in child processes.
struct IsaLevel {
  std::string name;                         // "native", "AVX2", "AVX512_CORE_BF16", ...
  std::map<std::string, std::string> env;   // ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY
  bool native() const { return env.empty(); }
};
std::vector<IsaLevel> isa_levels_offered();  // from /proc/cpuinfo, lowest first, "native" last
// "native" alone, or the named levels ("auto": every level this CPU offers). Throws gemma4::Error
// naming an unknown or unavailable level.
std::vector<IsaLevel> parse_isa_levels(const std::string& list);

enum class Expectation {
  kPass,           // legitimate: the whole suite passes
  kFail,           // faulty: at least one failing result in each category it declares
  kMayPass,        // faulty and below bf16/f16 resolution, run in bf16/f16: reported, not judged
};
const char* expectation_name(Expectation e);  // "pass", "fail", "may pass"
bool is_legitimate(const impl::Backend& backend);  // reference, fused or variant
Expectation expectation_for(const impl::Backend& backend, torch::ScalarType dtype);
// The categories a run covers: of `selected` (calibrate --categories; every category by default),
// all for a legitimate backend, and for a faulty one those where its bug must show (its declared
// categories); empty when a faulty backend declares none of them. The suite filter that runs them:
// "" when they are every category.
std::vector<Category> run_categories(const impl::Backend& backend, const std::vector<Category>& selected);
std::string categories_filter(const std::vector<Category>& categories);

// Whether a run's verdict is the one its backend's kind declares, in one line.
struct Judgement {
  bool as_expected = false;
  std::string finding;  // "pass (81 checks)", "fails in golden (12 results)", "PASSES in decode", ...
};
// `categories`: the run's (run_categories); a faulty backend must fail in each of them.
Judgement judge(const Run& run, const std::vector<Category>& categories, Expectation expect);

// A backend to calibrate and how a child `conform` selects it: {"--backend", name} or
// {"--backend-lib", path}.
struct Subject {
  const impl::Backend* backend;
  std::vector<std::string> select;
};
// The in-tree backends of kinds reference, fused, variant and faulty whose name matches `filter`.
std::vector<Subject> builtin_subjects(const std::string& filter);

struct CalibrationRun {
  Subject subject;
  torch::ScalarType dtype = torch::kFloat32;
  IsaLevel isa;
  Expectation expect = Expectation::kPass;
  std::vector<Category> categories;  // run_categories
  // Filled after the run.
  Run run;
  Judgement judgement;
  const impl::Backend& backend() const { return *subject.backend; }
  std::string who() const;  // "faulty-x" or "faulty-x @AVX2"
};

// One run per subject, dtype and ISA level (CPU; on CUDA only "native"), skipping a backend that
// does not support the device or dtype. A faulty backend runs only the categories where its bug
// must show (declared_filter); a plugin is held to its declared kind like any backend.
// Only the categories in `selected` run; a faulty backend that declares none of them is left out.
std::vector<CalibrationRun> plan_runs(const std::vector<Subject>& subjects, const std::vector<torch::ScalarType>& dtypes,
                                      const std::vector<IsaLevel>& isas, const torch::Device& device,
                                      const std::vector<Category>& selected);

// Per dtype and category: the worst legitimate ratio (error / bound) and the weakest faulty one.
struct Separation {
  std::string dtype;
  Category category;
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

// {"tool": "calibrate", "runs": [the report's runs, each with "kind", "isa", "expected",
// "as_expected", "finding"], "separation": [...], "faulty_strength": [...]}.
nlohmann::json calibration_json(const std::vector<CalibrationRun>& runs, const std::vector<Separation>& table,
                                const std::vector<FaultyStrength>& strengths);
// One row per run (test "<backend>.<dtype>.<isa>", pass when as expected): what CI's JUnit shows.
Report calibration_summary(const std::vector<CalibrationRun>& runs);

}  // namespace gemma4::conformance
