#pragma once
// Reading a run's rows into verdicts: per category (the matrix's cells, the scoreboard's cells) and
// against what the run's backend declares (conform --expect-declared, calibrate). The one place
// these rules are written; Python reaches them through gemma4_conform._core.
#include <string>
#include <vector>

#include "conformance/report.h"
#include "impl/backend.h"

namespace gemma4::conformance {

// ---- per category ----------------------------------------------------------------------------
enum class CategoryState {
  kPass,          // some test judged, none failed
  kFail,          // a row failed
  kNotSupported,  // rows, every one "not supported"
  kNotRun,        // no row: the category was left out (a filter) or has no check here
};
const char* category_state_name(CategoryState s);  // "pass", "fail", "not_supported", "not_run"

struct CategoryVerdict {
  Category category;
  CategoryState state = CategoryState::kNotRun;
  int tests = 0;         // distinct tests with rows in the category
  int judged_tests = 0;  // tests with a row that is not "not supported"
  int failed_tests = 0;
  double worst_ratio = 0;        // kFail: the largest error / bound among failing rows (Result::ratio)
  std::string worst_at;          // kFail: "<test> <case>" of that row
  std::vector<Result> failing;   // kFail: the failing rows, largest ratio first (ties in recorded order)
  std::string why;               // kNotSupported: up to three distinct reasons, sorted, "; "-joined
};
CategoryVerdict category_verdict(const Run& run, Category category);
// The categories with at least one row in the run, in the suite's order.
std::vector<Category> categories_run(const Run& run);

// ---- against the declaration -----------------------------------------------------------------
bool is_legitimate(const impl::Backend& backend);  // reference, fused or variant
Expectation expectation_for(const impl::Backend& backend, torch::ScalarType dtype);
// Judges a run against what its backend declares, in the categories that ran only: a legitimate
// backend must pass every check that ran; a faulty one must fail in each declared category that
// ran. When none of the categories it speaks of ran, the outcome is kNotRun, neither pass nor fail.
Declaration judge_declared(const Run& run, const impl::Backend& backend, torch::ScalarType dtype);

}  // namespace gemma4::conformance
