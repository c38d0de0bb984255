#include "impl/faulty/faulty_backends.h"

namespace gemma4::impl {

Backend faulty_backend(std::string name, std::string description, std::vector<Category> fails_in,
                       bool below_reduced_precision) {
  Backend b;
  b.name = std::move(name);
  b.description = std::move(description);
  b.kind = BackendKind::kFaulty;
  b.fails_in = std::move(fails_in);
  b.below_reduced_precision = below_reduced_precision;
  b.capabilities.deterministic = true;
  b.ops = reference_layer_ops();
  return b;
}

std::vector<Backend> faulty_backends() {
  std::vector<Backend> all = faulty_op_backends();
  for (Backend& b : faulty_numeric_backends()) all.push_back(std::move(b));
  for (Backend& b : faulty_kv_handoff_backends()) all.push_back(std::move(b));
  for (Backend& b : faulty_decode_backends()) all.push_back(std::move(b));
  for (Backend& b : faulty_cache_backends()) all.push_back(std::move(b));
  return all;
}

}  // namespace gemma4::impl
