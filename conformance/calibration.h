#pragma once
// Calibration's tables, from the engine's report of every legitimate implementation (the reference,
// the fused backend, the variants) and every faulty backend, each judged against its declaration
// (conformance/verdict.h): the separation between them, per dtype and category, of how close
// correct code came to the bounds and how far the weakest bug went past them (golden/FORMAT.md,
// "Separation"), and each faulty backend's strength. `gemma4-conform calibrate` prints them.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "conformance/report.h"

namespace gemma4::conformance {

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
std::vector<Separation> separation_table(const Report& calibration);

// Each faulty backend's largest ratio in its categories, per dtype: how far its bug goes.
struct FaultyStrength {
  std::string backend, dtype;  // backend: "faulty-x" or "faulty-x @AVX2"
  double ratio = 0;
  std::string at;  // the result that set it
};
std::vector<FaultyStrength> faulty_strengths(const Report& calibration);

// {"tool": "calibrate", "runs": [the report's runs, each with "kind", "isa", "expected",
// "as_expected", "finding"], "separation": [...], "faulty_strength": [...]}.
nlohmann::json calibration_json(const Report& calibration, const std::vector<Separation>& table,
                                const std::vector<FaultyStrength>& strengths);
// One row per run (test "<backend>.<dtype>.<isa>", pass when as expected): what CI's JUnit shows.
Report calibration_summary(const Report& calibration);

}  // namespace gemma4::conformance
