#include "golden/tolerance.h"

#include <ATen/ATen.h>

#include <cmath>

#include "reference/error.h"

namespace gemma4::golden {
namespace {

// fp32 (golden/FORMAT.md, "Tolerance policy"). Two fp32 implementations of the same math differ
// in the order of their sums. Measured: the committed CPU-made goldens recomputed on an H200 differ
// by at most 2.7e-5 of the tensor's scale (a gradient of the transformers MoE case), most tensors by
// under 1e-6; a wrong term (a window off by one, a (1 + w) norm, a 0.1% weight error) is far above
// 1e-4.
constexpr double kFp32RelativeBound = 1e-4;
constexpr double kFp32CosineMin = 0.99999;

// The FlashAttention rule's multipliers (FlashAttention's test suite uses 2 for outputs and 3 for
// gradients, which accumulate rounding through more operations).
constexpr double kForwardFactor = 2.0;
constexpr double kGradientFactor = 3.0;

void check_comparable(const torch::Tensor& a, const torch::Tensor& b, const char* what) {
  if (a.sizes() != b.sizes()) {
    throw Error(std::string("cannot compare: ") + what + " has shape " + shape_string(b.sizes()) +
                " but the candidate has " + shape_string(a.sizes()));
  }
}

double max_abs_of(const torch::Tensor& t) { return t.numel() == 0 ? 0.0 : t.abs().max().item<double>(); }

}  // namespace

Role role_of(const std::string& dataset) {
  return dataset.rfind("grads/", 0) == 0 ? Role::kGradient : Role::kForward;
}

double unit_roundoff(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return std::ldexp(1.0, -24);
    case torch::kBFloat16: return std::ldexp(1.0, -8);
    case torch::kFloat16: return std::ldexp(1.0, -11);
    case torch::kFloat64: return std::ldexp(1.0, -53);
    default: throw Error(std::string("no unit roundoff for dtype ") + c10::toString(dtype));
  }
}

Metrics measure(const torch::Tensor& candidate, const torch::Tensor& reference) {
  check_comparable(candidate, reference, "the reference");
  const torch::Tensor a = candidate.detach().to(torch::kCPU, torch::kFloat64).flatten();
  const torch::Tensor b = reference.detach().to(torch::kCPU, torch::kFloat64).flatten();
  Metrics m;
  m.ref_max = max_abs_of(b);
  m.max_abs = max_abs_of(a - b);
  m.max_rel = m.ref_max > 0 ? m.max_abs / m.ref_max : (m.max_abs > 0 ? INFINITY : 0.0);
  const double na = a.norm().item<double>(), nb = b.norm().item<double>();
  m.cosine = (na == 0 && nb == 0) ? 1.0 : (na == 0 || nb == 0) ? 0.0 : a.dot(b).item<double>() / (na * nb);
  const double signal = b.square().sum().item<double>(), noise = (a - b).square().sum().item<double>();
  m.nmse = signal > 0 ? noise / signal : (noise > 0 ? INFINITY : 0.0);
  return m;
}

Verdict check_fp32(const torch::Tensor& candidate, const torch::Tensor& golden, Role) {
  Verdict v;
  v.rule = "fp32";
  v.metrics = measure(candidate, golden);
  v.error = v.metrics.max_abs;
  v.bound = kFp32RelativeBound * v.metrics.ref_max;
  v.cosine_min = kFp32CosineMin;
  // NaN compares false, so a NaN anywhere fails.
  v.pass = v.error <= v.bound && v.metrics.cosine >= v.cosine_min;
  return v;
}

Verdict check_reduced_precision(const torch::Tensor& candidate, const torch::Tensor& baseline,
                                const torch::Tensor& truth, torch::ScalarType dtype, Role role) {
  check_comparable(candidate, baseline, "the baseline");
  Verdict v;
  v.rule = "flash-attention";
  v.metrics = measure(candidate, truth);
  v.baseline_error = measure(baseline, truth).max_abs;
  v.error = v.metrics.max_abs;
  // The floor is the error of merely rounding the truth to `dtype`: a baseline that happens to be
  // exact (a tensor of small integers, a lucky scalar) must not demand an exact candidate.
  const double k = role == Role::kGradient ? kGradientFactor : kForwardFactor;
  v.bound = k * v.baseline_error + unit_roundoff(dtype) * v.metrics.ref_max;
  v.pass = v.error <= v.bound;
  return v;
}

}  // namespace gemma4::golden
