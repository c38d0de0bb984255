#pragma once
// The Mann-Whitney U test (Wilcoxon rank-sum) for two independent samples of benchmark times. It
// asks whether one sample tends to be larger than the other without assuming a distribution: timings
// are skewed and have outliers (a preempted repetition), which a t-test handles badly.
#include <vector>

namespace gemma4::bench {

struct MannWhitney {
  // U of `b`: the number of pairs (a_i, b_j) with b_j > a_i, ties counting 1/2. 0..n_a*n_b.
  double u_b = 0;
  // One-sided p values: for "b tends to be larger than a" and for "b tends to be smaller".
  double p_b_greater = 1;
  double p_b_less = 1;
};

// The p values come from the normal approximation of U with the tie correction of the variance
// and a continuity correction of 1/2 (as scipy.stats.mannwhitneyu(method="asymptotic") computes
// them): z = (U - n_a n_b / 2 -+ 1/2) / sigma,
// sigma^2 = n_a n_b / 12 * ((N + 1) - sum_ties(t^3 - t) / (N (N - 1))), N = n_a + n_b.
// No exact enumeration: at 9 per side (the fewest bench-compare tests) the approximation is
// within 0.005 of the exact p from p = 0.4 down to 0.003 (test_mann_whitney checks it), and
// conservative in the far tail (separated samples of 9 give 2.1e-4; exactly, 1 / C(18, 9) = 2.1e-5).
// When every value is equal there is no evidence either way: both p values are 1. Both samples
// must be non-empty (throws std::invalid_argument otherwise).
MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace gemma4::bench
