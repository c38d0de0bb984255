#pragma once
// The check categories of the conformance suite. The suite's one table (conformance/categories.cpp)
// names each and lists its checks; the values are declared here, below the suite, so that a backend
// can say where it must fail: a faulty backend declares the categories in which its bug shows, and
// `gemma4-conform calibrate` holds it to that.
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
  kDecode,
  kRealSize,
};

}  // namespace gemma4::impl
