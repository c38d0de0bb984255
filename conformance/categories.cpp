// The categories of the conformance suite, in the order it runs and reports them: the one list.
#include "conformance/check.h"

namespace gemma4::conformance {

const std::vector<CategoryInfo>& categories() {
  static const std::vector<CategoryInfo> table = {
      {Category::kGolden, "golden", golden_checks},
      {Category::kOpSweep, "op_sweep", op_sweep_checks},
      {Category::kFiniteGrads, "finite_grads", finite_grads_checks},
      {Category::kMultithreadedRecompute, "multithreaded_recompute", multithreaded_recompute_checks},
      {Category::kKeyConventions, "key_conventions", key_conventions_checks},
      {Category::kMemoryFlatness, "memory_flatness", memory_flatness_checks},
      {Category::kDeterminism, "determinism", determinism_checks},
      {Category::kBadInput, "bad_input", bad_input_checks},
      {Category::kDecode, "decode", decode_checks},
      {Category::kRealSize, "real_size", real_size_checks},
  };
  return table;
}

const char* category_name(Category category) {
  for (const CategoryInfo& c : categories()) {
    if (c.category == category) return c.name;
  }
  return "?";
}

std::optional<Category> parse_category(const std::string& name) {
  for (const CategoryInfo& c : categories()) {
    if (name == c.name) return c.category;
  }
  return std::nullopt;
}

}  // namespace gemma4::conformance
