#include "impl/category.h"

namespace gemma4::impl {
namespace {

struct Named {
  Category category;
  const char* name;
};

// The one list of categories, in suite order.
constexpr Named kCategories[] = {
    {Category::kGolden, "golden"},
    {Category::kOpSweep, "op_sweep"},
    {Category::kFiniteGrads, "finite_grads"},
    {Category::kMultithreadedRecompute, "multithreaded_recompute"},
    {Category::kKeyConventions, "key_conventions"},
    {Category::kMemoryFlatness, "memory_flatness"},
    {Category::kDeterminism, "determinism"},
    {Category::kBadInput, "bad_input"},
};

}  // namespace

const std::vector<Category>& all_categories() {
  static const std::vector<Category> all = [] {
    std::vector<Category> out;
    for (const Named& n : kCategories) out.push_back(n.category);
    return out;
  }();
  return all;
}

const char* category_name(Category category) {
  for (const Named& n : kCategories) {
    if (n.category == category) return n.name;
  }
  return "?";
}

std::optional<Category> parse_category(const std::string& name) {
  for (const Named& n : kCategories) {
    if (name == n.name) return n.category;
  }
  return std::nullopt;
}

}  // namespace gemma4::impl
