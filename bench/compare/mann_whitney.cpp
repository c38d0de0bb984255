#include "bench/compare/mann_whitney.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace gemma4::bench {
namespace {

// P(Z > z) for a standard normal Z.
double upper_tail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

}  // namespace

MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.empty() || b.empty()) throw std::invalid_argument("mann_whitney: both samples must be non-empty");
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size()), n = na + nb;

  // Pool the samples (value, is b), sort, and give each run of equal values the average of the
  // ranks it spans (1-based), summing b's ranks and the tie term t^3 - t of every run.
  std::vector<std::pair<double, bool>> pooled;
  for (double v : a) pooled.emplace_back(v, false);
  for (double v : b) pooled.emplace_back(v, true);
  std::sort(pooled.begin(), pooled.end());
  double rank_sum_b = 0, tie_term = 0;
  for (size_t first = 0; first < pooled.size();) {
    size_t last = first;
    while (last + 1 < pooled.size() && pooled[last + 1].first == pooled[first].first) ++last;
    const double average_rank = (static_cast<double>(first + last) + 2) / 2;
    for (size_t i = first; i <= last; ++i) {
      if (pooled[i].second) rank_sum_b += average_rank;
    }
    const double t = static_cast<double>(last - first + 1);
    tie_term += t * t * t - t;
    first = last + 1;
  }

  MannWhitney result;
  result.u_b = rank_sum_b - nb * (nb + 1) / 2;
  const double mean = na * nb / 2;
  const double variance = na * nb / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  if (variance <= 0) return result;  // every value equal: no evidence, both p = 1
  const double sigma = std::sqrt(variance);
  // The continuity correction moves U half a step toward the mean, which the discrete U needs
  // to be compared with a continuous distribution.
  result.p_b_greater = upper_tail((result.u_b - mean - 0.5) / sigma);
  result.p_b_less = upper_tail((mean - result.u_b - 0.5) / sigma);
  return result;
}

}  // namespace gemma4::bench
