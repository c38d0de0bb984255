// The in-tree backends, in the order `gemma4-conform backends` prints them: the reference, the
// fused CUDA backends where they were built (a CUDA LibTorch and nvcc), then the legitimate variants,
// then the faulty ones.
#include "impl/backend.h"
#include "impl/faulty/faulty_backends.h"
#include "impl/variants/variant_backends.h"
#ifdef GEMMA4_CUDA_BACKEND
#include "impl/cuda/cuda_backend.h"
#endif

namespace gemma4::impl {

namespace {

Backend reference_backend() {
  Backend b;
  b.name = "reference";
  b.kind = BackendKind::kReference;
  b.description = "the eager LibTorch ops of the reference decoder (reference/layer_ops.cpp): the definition of right";
  b.ops = reference_layer_ops();
  return b;
}

}  // namespace

const std::vector<Backend>& builtin_backends() {
  static const std::vector<Backend> backends = [] {
    std::vector<Backend> all{reference_backend()};
#ifdef GEMMA4_CUDA_BACKEND
    for (Backend& b : cuda_backends()) all.push_back(std::move(b));
#endif
    for (Backend& b : variant_backends()) all.push_back(std::move(b));
    for (Backend& b : faulty_backends()) all.push_back(std::move(b));
    return all;
  }();
  return backends;
}

}  // namespace gemma4::impl
