#pragma once
// bench-compare's judgement: each benchmark of two reports paired by name, its change of median
// time and, where both sides have enough repetitions, a one-sided Mann-Whitney U test; plus the
// warnings about what makes the comparison weak (other GPU, other repetition counts, too few
// repetitions, aggregates only).
#include <limits>
#include <string>
#include <vector>

#include "bench/compare/bench_results.h"

namespace gemma4::bench {

struct CompareOptions {
  double threshold_percent = 5;  // a change of median smaller than this is never a verdict
  double alpha = 0.05;           // significance level of the one-sided test
  size_t min_repetitions = 9;    // per side; fewer and the test is not attempted
};

enum class Verdict {
  kRegression,
  kFaster,
  kSame,
  kTooFewRepetitions,
  kAggregatesOnly,
  kSkipped,
  kOnlyInBase,
  kOnlyInNew,
};
const std::vector<Verdict>& all_verdicts();  // in the order above (the summary's order)
const char* verdict_name(Verdict v);         // "regression", "too few repetitions", ...

struct Comparison {
  std::string name;
  const BenchmarkResult* base = nullptr;     // null: only in the new report
  const BenchmarkResult* current = nullptr;  // null: only in the base report
  double change_percent = std::numeric_limits<double>::quiet_NaN();  // (new median / base median - 1) x 100
  // The one-sided Mann-Whitney p in the direction of the change (new slower if change >= 0, else
  // new faster); NaN where no test was made.
  double p = std::numeric_limits<double>::quiet_NaN();
  Verdict verdict = Verdict::kSame;
  std::string note;  // why a benchmark was skipped ("new: no CUDA device")
};

// One row per benchmark: the base report's order, then those only in the new one.
// Regression: change > threshold and p(new slower) < alpha; faster: change < -threshold and
// p(new faster) < alpha; otherwise same. The reports must outlive the rows.
std::vector<Comparison> compare_reports(const BenchReport& base, const BenchReport& current,
                                        const CompareOptions& options);

// One line each (no trailing newline).
std::vector<std::string> comparison_warnings(const BenchReport& base, const BenchReport& current,
                                             const std::vector<Comparison>& rows, const CompareOptions& options);

// "3 regression, 1 faster, 12 same" over the verdicts that occur.
std::string verdict_counts(const std::vector<Comparison>& rows);

// bench-compare --json: the comparison as one JSON document, for scripts (the GPU CI reads the
// flagged benchmarks from it): the two paths, threshold_percent, alpha, the warnings, the count of
// every verdict (0 included), and one row per table row with the same name, medians in seconds,
// change_percent, p and the verdict's name; NaN as null.
std::string comparison_json(const BenchReport& base, const BenchReport& current, const std::vector<Comparison>& rows,
                            const std::vector<std::string>& warnings, const CompareOptions& options);

// Text forms shared by the table and the HTML report; "-" for NaN.
std::string format_seconds(double seconds);  // "12.35 ms", "803.1 us"
std::string format_percent(double percent);  // "+10.0%"
std::string format_p(double p);              // "0.031", "2.1e-04"
std::string format_number(double value);     // 4 significant digits

}  // namespace gemma4::bench
