// The Mann-Whitney U test of bench-compare (bench/compare/mann_whitney.h) against values derived
// independently: by hand (the derivations are in the comments), from scipy's documentation, and
// from an exact permutation distribution enumerated here.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "bench/compare/mann_whitney.h"

namespace gemma4::bench {
namespace {

// U of b by its definition: pairs with b_j > a_i, ties counting 1/2.
double u_by_pairs(const std::vector<double>& a, const std::vector<double>& b) {
  double u = 0;
  for (double x : a) {
    for (double y : b) u += y > x ? 1 : y == x ? 0.5 : 0;
  }
  return u;
}

// The exact one-sided p of "b larger": the share of the C(N, n_b) ways to split the pooled values
// into samples of the same sizes whose U of b is at least the observed one (a permutation test,
// which is what the U distribution is under the null hypothesis).
double exact_p_b_greater(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> pooled = a;
  pooled.insert(pooled.end(), b.begin(), b.end());
  const double observed = u_by_pairs(a, b);
  const size_t n = pooled.size(), nb = b.size();
  size_t at_least = 0, total = 0;
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    if (static_cast<size_t>(__builtin_popcount(mask)) != nb) continue;
    std::vector<double> x, y;
    for (size_t i = 0; i < n; ++i) (mask >> i & 1 ? y : x).push_back(pooled[i]);
    ++total;
    if (u_by_pairs(x, y) >= observed - 1e-9) ++at_least;
  }
  return static_cast<double>(at_least) / static_cast<double>(total);
}

TEST(MannWhitney, SeparatedSamplesOfNineGiveTheSmallestP) {
  const std::vector<double> a = {1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 0.98, 1.01, 0.99};
  std::vector<double> b;
  for (double x : a) b.push_back(x + 1);  // every b above every a
  const MannWhitney r = mann_whitney(a, b);
  // U = 9 x 9 = 81, mean 40.5; no ties: sigma^2 = 81/12 x 19 = 128.25;
  // z = (81 - 40.5 - 0.5) / sqrt(128.25) = 3.5320862855; P(Z > z) = 2.0614740e-4.
  EXPECT_EQ(r.u_b, 81);
  EXPECT_NEAR(r.p_b_greater, 2.0614740103e-4, 1e-12);
  EXPECT_GT(r.p_b_less, 0.999);
  // The exact p is 1 / C(18, 9) = 1 / 48620: only one split puts all of b on top. The
  // approximation is larger (conservative) and still far below 0.05.
  EXPECT_NEAR(exact_p_b_greater(a, b), 1.0 / 48620, 1e-15);
  EXPECT_GT(r.p_b_greater, 1.0 / 48620);
}

TEST(MannWhitney, IdenticalSamplesAreNotSignificant) {
  const std::vector<double> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const MannWhitney r = mann_whitney(a, a);
  // Every value twice: U = 81 / 2 = 40.5 = the mean. Nine ties of t = 2: sum(t^3 - t) = 54,
  // sigma^2 = 81/12 x (19 - 54 / (18 x 17)) = 127.0588; z = -0.5 / 11.2720 = -0.04436,
  // P(Z > z) = 0.5176903.
  EXPECT_EQ(r.u_b, 40.5);
  EXPECT_NEAR(r.p_b_greater, 0.5176903023, 1e-9);
  EXPECT_NEAR(r.p_b_less, 0.5176903023, 1e-9);
}

TEST(MannWhitney, ScipyDocumentationExample) {
  // scipy.stats.mannwhitneyu's documented example (from Conover): males [19, 22, 16, 29, 24] vs
  // females [20, 11, 17, 12]; U = 17 and, with method="asymptotic", the two-sided
  // p = 0.11134688653314041, so the one-sided p of "males larger" is half of it.
  const MannWhitney r = mann_whitney({20, 11, 17, 12}, {19, 22, 16, 29, 24});
  EXPECT_EQ(r.u_b, 17);
  EXPECT_NEAR(r.p_b_greater, 0.11134688653314041 / 2, 1e-12);
}

TEST(MannWhitney, TiesGetAverageRanksAndShrinkTheVariance) {
  // Pooled and sorted: 10a 20a 20a 20b 30a 30b 30b 40b. Ranks: 10 -> 1, the three 20s share
  // (2+3+4)/3 = 3, the three 30s (5+6+7)/3 = 6, 40 -> 8. Rank sum of b = 3 + 6 + 6 + 8 = 23,
  // U = 23 - 4 x 5 / 2 = 13 (by pairs: 2 + 3.5 + 3.5 + 4). Mean 8; ties t = 3 and 3:
  // sum(t^3 - t) = 48, sigma^2 = 16/12 x (9 - 48/56) = 10.857143; z = 4.5 / 3.295018 = 1.365698,
  // P(Z > z) = 0.0860169.
  const std::vector<double> a = {10, 20, 20, 30}, b = {20, 30, 30, 40};
  const MannWhitney r = mann_whitney(a, b);
  EXPECT_EQ(r.u_b, 13);
  EXPECT_EQ(u_by_pairs(a, b), 13);
  EXPECT_NEAR(r.p_b_greater, 0.08601685446, 1e-9);
}

TEST(MannWhitney, NormalApproximationIsCloseToTheExactDistributionAtNine) {
  // Nine against nine, b shifted by 0.5 .. 4.5 steps: U = 45, 53, 60, 66, 71; exact p from 0.37
  // down to 0.003. The approximation stays within 0.005 of it (the documented accuracy).
  std::vector<double> a;
  for (int i = 0; i < 9; ++i) a.push_back(i);
  for (int shift = 0; shift <= 4; ++shift) {
    std::vector<double> b;
    for (double x : a) b.push_back(x + shift + 0.5);
    const double exact = exact_p_b_greater(a, b);
    EXPECT_NEAR(mann_whitney(a, b).p_b_greater, exact, 0.005) << "shift " << shift << ", exact " << exact;
  }
}

TEST(MannWhitney, DirectionsAreMirrorImages) {
  const std::vector<double> a = {3, 1, 4, 1, 5, 9, 2, 6, 5}, b = {3, 5, 8, 9, 7, 9, 3, 2, 3};
  const MannWhitney ab = mann_whitney(a, b), ba = mann_whitney(b, a);
  EXPECT_DOUBLE_EQ(ab.p_b_greater, ba.p_b_less);
  EXPECT_DOUBLE_EQ(ab.p_b_less, ba.p_b_greater);
  EXPECT_DOUBLE_EQ(ab.u_b + ba.u_b, 81);  // U_a + U_b = n_a n_b
  EXPECT_EQ(ab.u_b, u_by_pairs(a, b));
}

TEST(MannWhitney, AllEqualValuesGiveNoEvidence) {
  const MannWhitney r = mann_whitney({2, 2, 2}, {2, 2});
  EXPECT_EQ(r.u_b, 3);
  EXPECT_EQ(r.p_b_greater, 1);
  EXPECT_EQ(r.p_b_less, 1);
}

TEST(MannWhitney, EmptySampleIsRefused) {
  EXPECT_THROW(mann_whitney({}, {1.0}), std::invalid_argument);
  EXPECT_THROW(mann_whitney({1.0}, {}), std::invalid_argument);
}

}  // namespace
}  // namespace gemma4::bench
