// The tolerance policy (golden/tolerance.h): each rule passes what it should and fails what it
// guards against.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "golden/tolerance.h"

namespace gemma4::golden {
namespace {

torch::Tensor sample(int64_t n = 4096, uint64_t seed = 1) {
  return at::randn({n}, at::TensorOptions().dtype(at::kFloat)).mul_(1.0 + static_cast<double>(seed % 3));
}

TEST(Tolerance, MetricsOfIdenticalAndZeroTensors) {
  const torch::Tensor a = sample();
  const Metrics same = measure(a, a);
  EXPECT_EQ(same.max_abs, 0.0);
  EXPECT_NEAR(same.cosine, 1.0, 1e-12);
  EXPECT_EQ(same.nmse, 0.0);
  const Metrics zeros = measure(at::zeros({3}), at::zeros({3}));
  EXPECT_EQ(zeros.cosine, 1.0);
  EXPECT_EQ(zeros.nmse, 0.0);
  const Metrics one_zero = measure(at::ones({3}), at::zeros({3}));
  EXPECT_EQ(one_zero.cosine, 0.0);
  EXPECT_TRUE(std::isinf(one_zero.nmse));
}

TEST(Tolerance, NmseIsMseOverSignal) {
  const torch::Tensor truth = at::tensor({1.0f, -2.0f, 3.0f, 0.0f});
  const torch::Tensor cand = at::tensor({1.5f, -2.0f, 3.0f, 0.5f});
  EXPECT_NEAR(measure(cand, truth).nmse, (0.25 + 0.25) / (1 + 4 + 9), 1e-12);
}

TEST(Tolerance, Fp32PassesReorderedSumsAndFailsARealError) {
  const torch::Tensor a = sample();
  // A different summation order: the error of an fp32 reordering, about 1e-7 of the scale.
  const torch::Tensor reordered = (a.to(at::kDouble) * 3.0 / 7.0 * 7.0 / 3.0).to(at::kFloat);
  EXPECT_TRUE(check_fp32(reordered, a, Role::kForward).pass);
  // One element off by 1e-3 of the scale: a single wrong term.
  torch::Tensor broken = a.clone();
  broken[17] += 1e-3 * a.abs().max().item<float>();
  const Verdict v = check_fp32(broken, a, Role::kForward);
  EXPECT_FALSE(v.pass);
  EXPECT_GT(v.error, v.bound);
}

TEST(Tolerance, Fp32FailsOnCosineEvenWithinTheAbsoluteBound) {
  // Small everywhere (within 1e-4 of the max) but the direction is wrong: a large outlier holds
  // the bound wide while the rest of the tensor carries no signal.
  torch::Tensor golden = at::full({100000}, 1e-5f);
  golden[0] = 1.0f;
  torch::Tensor cand = golden.clone();
  cand.slice(0, 1).neg_();
  const Verdict v = check_fp32(cand, golden, Role::kForward);
  EXPECT_LE(v.error, v.bound);
  EXPECT_LT(v.metrics.cosine, v.cosine_min);
  EXPECT_FALSE(v.pass);
}

TEST(Tolerance, NanFailsEveryRule) {
  const torch::Tensor a = sample();
  torch::Tensor nan = a.clone();
  nan[3] = NAN;
  EXPECT_FALSE(check_fp32(nan, a, Role::kForward).pass);
  EXPECT_FALSE(check_reduced_precision(nan, a, a, torch::kBFloat16, Role::kForward).pass);
}

TEST(Tolerance, FlashAttentionRuleFactorAndFloor) {
  const torch::Tensor truth = sample(8192, 2);
  const torch::Tensor baseline = truth.to(at::kBFloat16).to(at::kFloat);  // a same-dtype implementation
  const double base_err = measure(baseline, truth).max_abs;
  const double floor = unit_roundoff(torch::kBFloat16) * truth.abs().max().item<double>();

  const Verdict same = check_reduced_precision(baseline, baseline, truth, torch::kBFloat16, Role::kForward);
  EXPECT_TRUE(same.pass);
  EXPECT_DOUBLE_EQ(same.bound, 2 * base_err + floor);
  EXPECT_DOUBLE_EQ(check_reduced_precision(baseline, baseline, truth, torch::kBFloat16, Role::kGradient).bound,
                   3 * base_err + floor);

  // A candidate 4x as wrong as the baseline (plus the floor) fails the forward rule.
  const torch::Tensor worse = truth + (baseline - truth) * 4.0 + floor * at::sign(baseline - truth);
  EXPECT_FALSE(check_reduced_precision(worse, baseline, truth, torch::kBFloat16, Role::kForward).pass);
  // An exact baseline leaves only the floor: rounding the truth once passes, twice that fails.
  const Verdict exact = check_reduced_precision(baseline, truth, truth, torch::kBFloat16, Role::kForward);
  EXPECT_DOUBLE_EQ(exact.bound, floor);
  EXPECT_TRUE(exact.pass);
}

TEST(Tolerance, RoleFollowsTheDatasetName) {
  EXPECT_EQ(role_of("grads/layers.0.mlp.up_proj.weight"), Role::kGradient);
  EXPECT_EQ(role_of("outputs/logits"), Role::kForward);
}

TEST(Tolerance, ShapeMismatchIsAnError) { EXPECT_ANY_THROW(measure(at::zeros({2, 3}), at::zeros({3, 2}))); }

}  // namespace
}  // namespace gemma4::golden
