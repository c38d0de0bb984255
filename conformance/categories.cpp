// The categories of the conformance suite (impl/category.h holds the one list) with their checks.
#include "conformance/check.h"

namespace gemma4::conformance {

const std::vector<CategoryInfo>& categories() {
  // impl/category.h's list: each category with its name and its checks function.
#define GEMMA4_CATEGORY_ROW(value, name) {Category::value, #name, name##_checks},
  static const std::vector<CategoryInfo> table = {GEMMA4_CATEGORIES(GEMMA4_CATEGORY_ROW)};
#undef GEMMA4_CATEGORY_ROW
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
