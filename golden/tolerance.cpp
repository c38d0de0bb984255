#include "golden/tolerance.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

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

// Reduced precision: how much worse than the worst member of the baseline family a candidate may
// be, in max-abs and in RMS. The family (FORMAT.md) holds the eager reference and the in-tree
// legitimate variants; a correct implementation outside it rounds like one more member. Measured
// (FORMAT.md, "Separation"): leaving one member out and judging it against the others, the worst
// ratio over every committed bf16/f16 tensor on the CPU ISA levels and GPUs we ran is below
// kMaxFactor and kRmsFactor with the margins stated there, while every faulty backend's bug
// exceeds them by far more. RMS averages over the tensor, so it varies less than max-abs between
// implementations and takes the tighter factor; max-abs still catches a bug confined to a few
// elements that RMS dilutes.
constexpr double kMaxFactor = 4.0;
constexpr double kRmsFactor = 3.0;

// Expands `judged` (1/0, broadcastable) to a boolean mask of t's shape.
torch::Tensor judged_mask(const torch::Tensor& judged, const torch::Tensor& t) {
  return judged.to(t.device()).ne(0).expand(t.sizes());
}

void check_comparable(const torch::Tensor& a, const torch::Tensor& b, const char* what) {
  if (a.sizes() != b.sizes()) {
    throw Error(std::string("cannot compare: ") + what + " has shape " + shape_string(b.sizes()) +
                " but the candidate has " + shape_string(a.sizes()));
  }
}

double max_abs_of(const torch::Tensor& t) { return t.numel() == 0 ? 0.0 : t.abs().max().item<double>(); }

int64_t count_non_finite(const torch::Tensor& t) {
  return t.is_floating_point() ? (~at::isfinite(t)).sum().item<int64_t>() : 0;
}

double ratio_of(double error, double bound) {
  if (std::isnan(error)) return std::numeric_limits<double>::infinity();
  return bound > 0 ? error / bound : (error > 0 ? std::numeric_limits<double>::infinity() : 0.0);
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

}  // namespace

Role role_of(const std::string& dataset) {
  return dataset.rfind("grads/", 0) == 0 ? Role::kGradient : Role::kForward;
}

const char* rule_name(Rule rule) { return rule == Rule::kFp32 ? "fp32" : "family"; }

double unit_roundoff(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return std::ldexp(1.0, -24);
    case torch::kBFloat16: return std::ldexp(1.0, -8);
    case torch::kFloat16: return std::ldexp(1.0, -11);
    case torch::kFloat64: return std::ldexp(1.0, -53);
    default: throw Error(std::string("no unit roundoff for dtype ") + c10::toString(dtype));
  }
}

Metrics measure(const torch::Tensor& candidate, const torch::Tensor& reference, const torch::Tensor& judged) {
  check_comparable(candidate, reference, "the reference");
  // In fp64 on the reference's device: a gradient of a real-width model is judged on the GPU that
  // holds it (copying it to the host would cost more than the comparison).
  const torch::Device device = reference.device();
  torch::Tensor a = candidate.detach().to(device, torch::kFloat64).flatten();
  torch::Tensor b = reference.detach().to(device, torch::kFloat64).flatten();
  if (judged.defined()) {
    const torch::Tensor mask = judged_mask(judged, reference).flatten();
    a = a.masked_select(mask);
    b = b.masked_select(mask);
  }
  Metrics m;
  m.ref_max = max_abs_of(b);
  m.max_abs = max_abs_of(a - b);
  m.max_rel = m.ref_max > 0 ? m.max_abs / m.ref_max : (m.max_abs > 0 ? INFINITY : 0.0);
  const double na = a.norm().item<double>(), nb = b.norm().item<double>();
  m.cosine = (na == 0 && nb == 0) ? 1.0 : (na == 0 || nb == 0) ? 0.0 : a.dot(b).item<double>() / (na * nb);
  const double signal = b.square().sum().item<double>(), noise = (a - b).square().sum().item<double>();
  m.nmse = signal > 0 ? noise / signal : (noise > 0 ? INFINITY : 0.0);
  const double n = std::max<double>(1.0, static_cast<double>(a.numel()));
  m.rms = std::sqrt(noise / n);
  m.ref_rms = std::sqrt(signal / n);
  return m;
}

// The RMS criterion is the one reported when it is nearer to its bound than max-abs.
bool Verdict::rms_decides() const {
  return rule == Rule::kReducedPrecision && ratio_of(metrics.rms, rms_bound) > ratio_of(metrics.max_abs, max_bound);
}
double Verdict::error() const { return rms_decides() ? metrics.rms : metrics.max_abs; }
double Verdict::bound() const { return rms_decides() ? rms_bound : max_bound; }

double Verdict::ratio() const {
  if (non_finite > 0) return std::numeric_limits<double>::infinity();
  return ratio_of(error(), bound());
}

std::string Verdict::baseline_error_text() const {
  if (rule != Rule::kReducedPrecision) return "";
  return "baseline max " + sci(baseline.max_abs) + " (" + baseline.max_abs_by + ") rms " + sci(baseline.rms) + " (" +
         baseline.rms_by + ")";
}

Verdict check_fp32(const torch::Tensor& candidate, const torch::Tensor& golden, const torch::Tensor& judged) {
  Verdict v;
  v.rule = Rule::kFp32;
  v.metrics = measure(candidate, golden, judged);
  v.non_finite = count_non_finite(candidate);
  v.max_bound = kFp32RelativeBound * v.metrics.ref_max;
  v.cosine_min = kFp32CosineMin;
  // NaN compares false, so a NaN anywhere fails.
  v.pass = v.non_finite == 0 && v.metrics.max_abs <= v.max_bound && v.metrics.cosine >= v.cosine_min;
  return v;
}

Verdict check_reduced_precision(const torch::Tensor& candidate, const torch::Tensor& truth, const BaselineError& baseline,
                                torch::ScalarType dtype, const torch::Tensor& judged) {
  Verdict v;
  v.rule = Rule::kReducedPrecision;
  v.metrics = measure(candidate, truth, judged);
  v.baseline = baseline;
  v.non_finite = count_non_finite(candidate);
  // The floor is what merely rounding the truth to `dtype` costs: a family that happens to be exact
  // (a tensor of small integers, a lucky scalar such as the loss) must not demand an exact candidate.
  const double u = unit_roundoff(dtype);
  v.max_bound = kMaxFactor * baseline.max_abs + u * v.metrics.ref_max;
  v.rms_bound = kRmsFactor * baseline.rms + u * v.metrics.ref_rms;
  v.pass = v.non_finite == 0 && v.metrics.max_abs <= v.max_bound && v.metrics.rms <= v.rms_bound;
  return v;
}

}  // namespace gemma4::golden
