// The tolerance policy (golden/tolerance.h, golden/baseline.h): each rule passes what it should and
// fails what it guards against, on the judged positions only, and the baseline family's errors
// are read as FORMAT.md says.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "golden/baseline.h"
#include "golden/tolerance.h"

namespace gemma4::golden {
namespace {

torch::Tensor sample(int64_t n = 4096, uint64_t seed = 1) {
  at::manual_seed(seed);
  return at::randn({n}, at::TensorOptions().dtype(at::kFloat)).mul_(1.0 + static_cast<double>(seed % 3));
}

TEST(Tolerance, MetricsOfIdenticalAndZeroTensors) {
  const torch::Tensor a = sample();
  const Metrics same = measure(a, a);
  EXPECT_EQ(same.max_abs, 0.0);
  EXPECT_EQ(same.rms, 0.0);
  EXPECT_NEAR(same.cosine, 1.0, 1e-12);
  EXPECT_EQ(same.nmse, 0.0);
  const Metrics zeros = measure(at::zeros({3}), at::zeros({3}));
  EXPECT_EQ(zeros.cosine, 1.0);
  EXPECT_EQ(zeros.nmse, 0.0);
  const Metrics one_zero = measure(at::ones({3}), at::zeros({3}));
  EXPECT_EQ(one_zero.cosine, 0.0);
  EXPECT_TRUE(std::isinf(one_zero.nmse));
}

TEST(Tolerance, NmseAndRmsByHand) {
  const torch::Tensor truth = at::tensor({1.0f, -2.0f, 3.0f, 0.0f});
  const torch::Tensor cand = at::tensor({1.5f, -2.0f, 3.0f, 0.5f});
  const Metrics m = measure(cand, truth);
  EXPECT_NEAR(m.nmse, (0.25 + 0.25) / (1 + 4 + 9), 1e-12);
  EXPECT_NEAR(m.rms, std::sqrt(0.5 / 4), 1e-12);
  EXPECT_NEAR(m.ref_rms, std::sqrt(14.0 / 4), 1e-12);
}

TEST(Tolerance, MetricsSkipDontCarePositions) {
  // Rows [B=2, S=3, 2]: row (1, 0) is don't-care and may hold anything finite.
  const torch::Tensor truth = at::arange(12, at::kFloat).view({2, 3, 2});
  torch::Tensor cand = truth.clone();
  cand[1][0] = 1000;
  const torch::Tensor judged = at::tensor({1, 1, 1, 0, 1, 1}, at::kLong).view({2, 3, 1});
  EXPECT_EQ(measure(cand, truth, judged).max_abs, 0.0);
  EXPECT_GT(measure(cand, truth).max_abs, 0.0);
  EXPECT_TRUE(check_fp32(cand, truth, judged).pass);
  // ... but NaN there is a bug (it poisons backward through NaN * 0).
  cand[1][0] = NAN;
  const Verdict v = check_fp32(cand, truth, judged);
  EXPECT_EQ(v.non_finite, 2);
  EXPECT_FALSE(v.pass);
  EXPECT_TRUE(std::isinf(v.ratio()));
}

TEST(Tolerance, Fp32PassesReorderedSumsAndFailsARealError) {
  const torch::Tensor a = sample();
  // A different summation order: the error of an fp32 reordering, about 1e-7 of the scale.
  const torch::Tensor reordered = (a.to(at::kDouble) * 3.0 / 7.0 * 7.0 / 3.0).to(at::kFloat);
  EXPECT_TRUE(check_fp32(reordered, a).pass);
  // One element off by 1e-3 of the scale: a single wrong term.
  torch::Tensor broken = a.clone();
  broken[17] += 1e-3 * a.abs().max().item<float>();
  const Verdict v = check_fp32(broken, a);
  EXPECT_FALSE(v.pass);
  EXPECT_GT(v.error(), v.bound());
  EXPECT_GT(v.ratio(), 1.0);
}

TEST(Tolerance, Fp32FailsOnCosineEvenWithinTheAbsoluteBound) {
  // Small everywhere (within 1e-4 of the max) but the direction is wrong: a large outlier holds
  // the bound wide while the rest of the tensor carries no signal.
  torch::Tensor golden = at::full({100000}, 1e-5f);
  golden[0] = 1.0f;
  torch::Tensor cand = golden.clone();
  cand.slice(0, 1).neg_();
  const Verdict v = check_fp32(cand, golden);
  EXPECT_LE(v.error(), v.bound());
  EXPECT_LT(v.metrics.cosine, v.cosine_min);
  EXPECT_FALSE(v.pass);
}

TEST(Tolerance, NanFailsEveryRule) {
  const torch::Tensor a = sample();
  torch::Tensor nan = a.clone();
  nan[3] = NAN;
  EXPECT_FALSE(check_fp32(nan, a).pass);
  EXPECT_FALSE(check_reduced_precision(nan, a, BaselineError{1.0, 1.0}, torch::kBFloat16).pass);
}

// The family rule: max|c - t| <= 4 B_max + u max|t| and rms(c - t) <= 3 B_rms + u rms(t).
TEST(Tolerance, FamilyRuleFactorsAndFloor) {
  const torch::Tensor truth = sample(8192, 2);
  const torch::Tensor member = truth.to(at::kBFloat16).to(at::kFloat);  // a same-dtype implementation
  const Metrics own = measure(member, truth);
  const BaselineError family{own.max_abs, own.rms, "expected", "expected"};
  const double u = unit_roundoff(torch::kBFloat16);

  const Verdict same = check_reduced_precision(member, truth, family, torch::kBFloat16);
  EXPECT_TRUE(same.pass);
  EXPECT_DOUBLE_EQ(same.max_bound, 4 * own.max_abs + u * own.ref_max);
  EXPECT_DOUBLE_EQ(same.rms_bound, 3 * own.rms + u * own.ref_rms);

  // Every element 5x as wrong as the member (plus the floor): fails both criteria.
  const torch::Tensor worse = truth + (member - truth) * 5.0 + u * own.ref_max * at::sign(member - truth);
  const Verdict v = check_reduced_precision(worse, truth, family, torch::kBFloat16);
  EXPECT_FALSE(v.pass);
  EXPECT_GT(v.metrics.max_abs, v.max_bound);
  EXPECT_GT(v.metrics.rms, v.rms_bound);

  // An exact family leaves only the floor: rounding the truth once passes.
  const Verdict exact = check_reduced_precision(member, truth, BaselineError{}, torch::kBFloat16);
  EXPECT_DOUBLE_EQ(exact.max_bound, u * own.ref_max);
  EXPECT_TRUE(exact.pass);
}

TEST(Tolerance, RmsCatchesASpreadErrorThatMaxAbsAllows) {
  // The family's errors are the same everywhere; the candidate is wrong by 3.5x that on every
  // element: under 4x in max-abs, over 3x in RMS. A bug spread over a whole tensor.
  const torch::Tensor truth = sample(8192, 4);
  const torch::Tensor member_err = at::full_like(truth, 1e-2);
  const Metrics own = measure(truth + member_err, truth);
  const BaselineError family{own.max_abs, own.rms, "a", "a"};
  const torch::Tensor cand = truth + 3.5 * member_err;
  const Verdict v = check_reduced_precision(cand, truth, family, torch::kFloat16);
  EXPECT_LE(v.metrics.max_abs, v.max_bound);
  EXPECT_GT(v.metrics.rms, v.rms_bound);
  EXPECT_FALSE(v.pass);
  EXPECT_TRUE(v.rms_decides());
  EXPECT_EQ(v.error(), v.metrics.rms);
}

TEST(Tolerance, MaxAbsCatchesALocalErrorThatRmsDilutes) {
  const torch::Tensor truth = sample(8192, 5);
  const torch::Tensor member_err = at::full_like(truth, 1e-2);
  const Metrics own = measure(truth + member_err, truth);
  const BaselineError family{own.max_abs, own.rms, "a", "a"};
  torch::Tensor cand = truth + member_err;
  cand[100] += 0.1;  // one element 11x the family's error
  const Verdict v = check_reduced_precision(cand, truth, family, torch::kFloat16);
  EXPECT_LE(v.metrics.rms, v.rms_bound);
  EXPECT_GT(v.metrics.max_abs, v.max_bound);
  EXPECT_FALSE(v.pass);
  EXPECT_FALSE(v.rms_decides());
}

TEST(Tolerance, BaselineTakesTheWorstMemberAndLeavesTheCandidateOut) {
  GoldenCase g;
  g.baseline_family = {"expected", "variant-a", "variant-b"};
  g.baseline["outputs/y"] = torch::tensor({1e-3f, 4e-4f, 2e-3f, 1e-4f, 5e-4f, 6e-4f}).view({3, 2});
  const BaselineError all = baseline_error(g, "outputs/y");
  EXPECT_FLOAT_EQ(all.max_abs, 2e-3f);
  EXPECT_EQ(all.max_abs_by, "variant-a");
  EXPECT_FLOAT_EQ(all.rms, 6e-4f);
  EXPECT_EQ(all.rms_by, "variant-b");
  const BaselineError without_a = baseline_error(g, "outputs/y", "variant-a");
  EXPECT_FLOAT_EQ(without_a.max_abs, 1e-3f);
  EXPECT_EQ(without_a.max_abs_by, "expected");
  EXPECT_ANY_THROW(baseline_error(g, "outputs/z"));
}

TEST(Tolerance, RoleFollowsTheDatasetName) {
  EXPECT_EQ(role_of("grads/layers.0.mlp.up_proj.weight"), Role::kGradient);
  EXPECT_EQ(role_of("outputs/logits"), Role::kForward);
}

TEST(Tolerance, ShapeMismatchIsAnError) { EXPECT_ANY_THROW(measure(at::zeros({2, 3}), at::zeros({3, 2}))); }

}  // namespace
}  // namespace gemma4::golden
