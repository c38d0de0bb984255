#include "impl/faulty/faulty_backends.h"

#include <algorithm>

namespace gemma4::impl {

Backend faulty_backend(std::string name, std::string description, std::vector<Category> fails_in,
                       bool below_reduced_precision) {
  Backend b;
  b.name = std::move(name);
  b.description = std::move(description);
  b.kind = BackendKind::kFaulty;
  b.fails_in = std::move(fails_in);
  // A bug the golden or decode category sees shows in real_size too, whose goldens and decode
  // goldens are the same computations at the released sizes (measured on golden/real for every
  // faulty backend; calibrate --categories real_size holds each to it in every dtype).
  const auto declares = [&](Category c) { return std::count(b.fails_in.begin(), b.fails_in.end(), c) > 0; };
  if ((declares(Category::kGolden) || declares(Category::kDecode)) && !declares(Category::kRealSize)) {
    b.fails_in.push_back(Category::kRealSize);
  }
  b.below_reduced_precision = below_reduced_precision;
  b.capabilities.deterministic = true;
  b.ops = reference_layer_ops();
  return b;
}

void below_resolution_at_real_size(Backend& b) {
  b.fails_in.erase(std::remove(b.fails_in.begin(), b.fails_in.end(), Category::kRealSize), b.fails_in.end());
}

std::vector<Backend> faulty_backends() {
  std::vector<Backend> all = faulty_op_backends();
  for (Backend& b : faulty_numeric_backends()) all.push_back(std::move(b));
  for (Backend& b : faulty_kv_handoff_backends()) all.push_back(std::move(b));
  for (Backend& b : faulty_decode_backends()) all.push_back(std::move(b));
  for (Backend& b : faulty_cache_backends()) all.push_back(std::move(b));
  for (Backend& b : faulty_fp8_kv_cache_backends()) all.push_back(std::move(b));
  for (Backend& b : faulty_long_context_backends()) all.push_back(std::move(b));
  for (Backend& b : faulty_model_op_backends()) all.push_back(std::move(b));
  for (Backend& b : faulty_accumulator_backends()) all.push_back(std::move(b));
  return all;
}

}  // namespace gemma4::impl
