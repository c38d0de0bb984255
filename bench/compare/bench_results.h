#pragma once
// A Google Benchmark JSON report (gemma4-bench --benchmark_out_format=json) as bench-compare needs
// it: per benchmark, the times of its repetitions (the samples it tests), its median, its speed
// counters, or why it was skipped.
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace gemma4::bench {

// The counters the HTML report can plot as speed, in order of preference.
inline const std::vector<std::string> kSpeedCounters = {"TFLOP/s", "GB/s"};

struct BenchmarkResult {
  // The run_name, e.g. "rms_norm/reference/cpu/tiny/64/fp32/fwd/manual_time": what the
  // repetitions ("iteration" rows) and the aggregates ("_median" etc.) of one benchmark share.
  std::string name;
  std::vector<double> seconds;  // real_time of each repetition, in seconds, in file order
  // The median of `seconds`; when the file holds no repetitions of this benchmark, the "median"
  // aggregate's real_time (NaN if there is none either).
  double median_seconds = std::numeric_limits<double>::quiet_NaN();
  std::map<std::string, double> speed;  // kSpeedCounters present: median over repetitions (or the median aggregate's)
  std::string skip_reason;              // the error/skip message of a benchmark that did not run
  bool skipped() const { return !skip_reason.empty(); }
  bool aggregates_only() const { return !skipped() && seconds.empty(); }
};

struct BenchReport {
  std::string path;
  std::map<std::string, std::string> context;  // the scalar "context" fields (gpu, host_name, git_sha, ...) as text
  std::vector<BenchmarkResult> benchmarks;     // in the order they first appear in the file
  // context "repetitions" (gemma4-bench writes it), else the largest per-row "repetitions"; 0 if neither.
  int repetitions = 0;

  const BenchmarkResult* find(const std::string& name) const;
  bool aggregates_only() const;  // some benchmark ran, and none has per-repetition rows
};

// Throws gemma4::Error with one line naming `path` (and the row and field at fault) when the file
// cannot be read, is not JSON, or is not a Google Benchmark report.
BenchReport read_bench_report(const std::string& path);

// The median of a non-empty sample (the mean of the middle two for an even count).
double median(std::vector<double> values);

}  // namespace gemma4::bench
