#pragma once
// The check categories of the conformance suite: the one list, in the order the suite runs and
// reports them. Each entry is (enum value, name); the name is also the stem of the category's
// checks function (conformance/categories.cpp: golden -> golden_checks). The values are declared
// here, below the suite, so that a backend can say where it must fail: a faulty backend declares
// the categories in which its bug shows, and `gemma4-conform calibrate` holds it to that. Python
// reads the list from the bound enum (gemma4_conform._core.Category).
#define GEMMA4_CATEGORIES(X)                           \
  X(kGolden, golden)                                   \
  X(kOpSweep, op_sweep)                                \
  X(kFiniteGrads, finite_grads)                        \
  X(kMultithreadedRecompute, multithreaded_recompute)  \
  X(kKeyConventions, key_conventions)                  \
  X(kMemoryFlatness, memory_flatness)                  \
  X(kDeterminism, determinism)                         \
  X(kBadInput, bad_input)                              \
  X(kDecode, decode)                                   \
  X(kRealSize, real_size)

namespace gemma4::impl {

enum class Category {
#define GEMMA4_CATEGORY_VALUE(value, name) value,
  GEMMA4_CATEGORIES(GEMMA4_CATEGORY_VALUE)
#undef GEMMA4_CATEGORY_VALUE
};

}  // namespace gemma4::impl
