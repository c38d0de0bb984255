#pragma once
// The check categories of the conformance suite (conformance/suite.cpp maps each to its checks).
// They are named here, below the suite, so that a backend can say where it must fail: a faulty
// backend declares the categories in which its bug shows, and `gemma4-conform calibrate` holds it
// to that.
#include <optional>
#include <string>
#include <vector>

namespace gemma4::impl {

enum class Category {
  kGolden,
  kOpSweep,
  kFiniteGrads,
  kMultithreadedRecompute,
  kKeyConventions,
  kMemoryFlatness,
  kDeterminism,
  kBadInput,
};

// Every category, in the order the suite runs and reports them.
const std::vector<Category>& all_categories();
// "golden", "op_sweep", ... as in a check's name "<category>/<check>".
const char* category_name(Category category);
std::optional<Category> parse_category(const std::string& name);

}  // namespace gemma4::impl
