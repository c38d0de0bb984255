// The `gemma4-conform bench-compare` contract, through the real binary, on synthetic Google
// Benchmark reports written here: verdicts and exit codes, the threshold, the repetition minimum,
// the context warnings, the HTML report, and one-line errors.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "reference/files.h"
#include "tools/tests/cli_runner.h"

namespace gemma4 {
namespace {

using nlohmann::json;
using test::CliResult;
using test::expect_one_line_error;
using test::run_cli;

const std::vector<std::string> kNames = {"rms_norm/reference/cpu/tiny/64/fp32/fwd/manual_time",
                                         "rms_norm/reference/cpu/tiny/256/fp32/fwd/manual_time",
                                         "geglu/reference/cpu/tiny/64/fp32/fwdbwd/manual_time"};

// Repetition i of a benchmark whose typical time is `ms`: within +-1% of it, in a fixed pattern.
double quiet_time(double ms, int i) { return ms * (1 + 0.0025 * ((i * 7) % 9 - 4)); }

// Repetition i spread over 0.5x .. 1.5x of `ms`: so noisy that a 10% shift is not significant.
double noisy_time(double ms, int i) { return ms * (0.5 + 0.125 * ((i * 4) % 9)); }

struct SyntheticRun {
  std::string gpu = "NVIDIA H100 80GB HBM3";
  int repetitions = 9;
  double factor = 1;  // every repetition's time multiplied by this
  bool noisy = false;
  std::vector<std::string> names = kNames;
  std::vector<std::string> skipped;  // benchmarks that report an error in every repetition
  bool aggregates_only = false;
};

// A report shaped like gemma4-bench's: per-repetition rows then the aggregates of each benchmark
// (times in ms, a GB/s counter), the custom context keys.
json make_report(const SyntheticRun& run) {
  json report;
  report["context"] = {{"host_name", "ci"},       {"num_cpus", 2}, {"gpu", run.gpu}, {"git_sha", "abc"},
                       {"repetitions", std::to_string(run.repetitions)}, {"torch", "2.11.0"}};
  report["benchmarks"] = json::array();
  for (size_t b = 0; b < run.names.size(); ++b) {
    const std::string& name = run.names[b];
    const double ms = 0.1 * static_cast<double>(b + 1);
    const bool skipped = std::find(run.skipped.begin(), run.skipped.end(), name) != run.skipped.end();
    std::vector<double> times;
    for (int i = 0; i < run.repetitions; ++i) {
      times.push_back((run.noisy ? noisy_time(ms, i) : quiet_time(ms, i)) * run.factor);
      json row = {{"name", name},       {"run_name", name}, {"run_type", "iteration"}, {"repetitions", run.repetitions},
                  {"repetition_index", i}, {"iterations", 100}, {"real_time", times.back()},
                  {"cpu_time", times.back()}, {"time_unit", "ms"}, {"GB/s", 1.0 / times.back()}};
      if (skipped) {
        row["error_occurred"] = true;
        row["error_message"] = "no CUDA device";
      }
      if (!run.aggregates_only) report["benchmarks"].push_back(row);
    }
    if (skipped) continue;  // Google Benchmark does not aggregate failed runs
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    for (const char* aggregate : {"mean", "median", "stddev"}) {
      report["benchmarks"].push_back({{"name", name + "_" + aggregate}, {"run_name", name}, {"run_type", "aggregate"},
                                      {"aggregate_name", aggregate}, {"repetitions", run.repetitions},
                                      {"real_time", median}, {"cpu_time", median}, {"time_unit", "ms"},
                                      {"GB/s", 1 / median}});
    }
  }
  return report;
}

class BenchCompareCli : public ::testing::Test {
 protected:
  std::string dir_ = files::make_temp_directory("gemma4_bench_compare_");

  std::string write(const std::string& file, const SyntheticRun& run) {
    const std::string path = files::join(dir_, file);
    std::ofstream(path) << make_report(run).dump(1);
    return path;
  }

  // bench-compare of a default (quiet, 9 repetitions) base against `current`.
  CliResult compare(const SyntheticRun& current, const std::string& options = "") {
    return run_cli("bench-compare " + write("base.json", SyntheticRun{}) + " " + write("new.json", current) + " " +
                   options);
  }
};

// The verdict column of the table row of `name` ("" when there is no row).
std::string verdict_of(const std::string& out, const std::string& name) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + " ", 0) != 0) continue;
    // Columns: name, base median, new median (number and unit each), change, p, verdict.
    std::istringstream fields(line.substr(name.size()));
    std::string skip, verdict, word;
    const bool base_dash = (fields >> skip, skip == "-");
    if (!base_dash) fields >> skip;
    const bool new_dash = (fields >> skip, skip == "-");
    if (!new_dash) fields >> skip;
    fields >> skip >> skip;  // change, p
    while (fields >> word) verdict += (verdict.empty() ? "" : " ") + word;
    return verdict;
  }
  return "";
}

TEST_F(BenchCompareCli, IdenticalReportsAreTheSame) {
  const CliResult r = compare(SyntheticRun{});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string& name : kNames) EXPECT_EQ(verdict_of(r.out, name), "same") << r.out;
  EXPECT_NE(r.out.find("bench-compare: 3 benchmarks: 3 same"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(BenchCompareCli, TenPercentSlowerInEveryRepetitionIsARegression) {
  SyntheticRun slower;
  slower.factor = 1.10;
  const CliResult r = compare(slower);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  for (const std::string& name : kNames) EXPECT_EQ(verdict_of(r.out, name), "regression") << r.out;
  EXPECT_NE(r.out.find("+10.0%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 regression"), std::string::npos) << r.out;
}

TEST_F(BenchCompareCli, TenPercentFasterIsReportedAndPasses) {
  SyntheticRun faster;
  faster.factor = 0.90;
  const CliResult r = compare(faster);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string& name : kNames) EXPECT_EQ(verdict_of(r.out, name), "faster") << r.out;
}

TEST_F(BenchCompareCli, ThreePercentSlowerIsBelowTheThreshold) {
  SyntheticRun slower;
  slower.factor = 1.03;
  const CliResult r = compare(slower);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string& name : kNames) EXPECT_EQ(verdict_of(r.out, name), "same") << r.out;
}

TEST_F(BenchCompareCli, TenPercentSlowerInHeavyNoiseIsNotSignificant) {
  // Both sides spread over 0.5x .. 1.5x; the new one 10% slower in every repetition. The medians
  // differ by 10% but the samples overlap so much that the test finds nothing (p about 0.3).
  SyntheticRun base, slower;
  base.noisy = slower.noisy = true;
  slower.factor = 1.10;
  const CliResult r =
      run_cli("bench-compare " + write("noisy_base.json", base) + " " + write("noisy_new.json", slower));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string& name : kNames) EXPECT_EQ(verdict_of(r.out, name), "same") << r.out;
  EXPECT_NE(r.out.find("+10.0%"), std::string::npos) << r.out;
}

TEST_F(BenchCompareCli, ThresholdOption) {
  SyntheticRun slower;
  slower.factor = 1.10;
  CliResult r = compare(slower, "--threshold 20");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string& name : kNames) EXPECT_EQ(verdict_of(r.out, name), "same") << r.out;
  EXPECT_NE(r.out.find("threshold 20%"), std::string::npos) << r.out;
  slower.factor = 1.03;
  r = compare(slower, "--threshold 2");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
}

TEST_F(BenchCompareCli, TooFewRepetitionsWarnAndPass) {
  SyntheticRun base, slower;
  base.repetitions = slower.repetitions = 5;
  slower.factor = 1.10;
  const CliResult r = run_cli("bench-compare " + write("b5.json", base) + " " + write("n5.json", slower));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string& name : kNames) {
    EXPECT_EQ(verdict_of(r.out, name), "too few repetitions") << r.out;
    EXPECT_NE(r.err.find("warning: " + name + ": 5 repetitions in base, 5 in new; the test needs at least 9"),
              std::string::npos)
        << r.err;
  }
}

TEST_F(BenchCompareCli, WarnsAboutDifferentGpusAndRepetitionCounts) {
  SyntheticRun other;
  other.gpu = "NVIDIA H200";
  other.repetitions = 10;
  const CliResult r = compare(other);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("warning: different GPUs: base 'NVIDIA H100 80GB HBM3', new 'NVIDIA H200'"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("warning: different repetition counts: base 9, new 10"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
}

TEST_F(BenchCompareCli, OneSidedAndSkippedBenchmarksAreListedNotFailed) {
  SyntheticRun current;
  current.names = {kNames[0], kNames[1], "rms_norm/cuda/cuda/tiny/64/bf16/fwd/manual_time"};
  current.skipped = {kNames[1]};
  current.factor = 1.5;  // kNames[0] regresses; the skipped one would too, had it run
  const CliResult r = compare(current);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(verdict_of(r.out, kNames[0]), "regression") << r.out;
  EXPECT_EQ(verdict_of(r.out, kNames[1]), "skipped (new: no CUDA device)") << r.out;
  EXPECT_EQ(verdict_of(r.out, kNames[2]), "only in base") << r.out;
  EXPECT_EQ(verdict_of(r.out, "rms_norm/cuda/cuda/tiny/64/bf16/fwd/manual_time"), "only in new") << r.out;

  current.factor = 1;
  EXPECT_EQ(compare(current).exit_code, 0);
}

TEST_F(BenchCompareCli, AggregatesOnlyReportsCannotBeTested) {
  SyntheticRun aggregates;
  aggregates.aggregates_only = true;
  aggregates.factor = 1.5;
  const CliResult r = compare(aggregates);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string& name : kNames) EXPECT_EQ(verdict_of(r.out, name), "aggregates only") << r.out;
  EXPECT_NE(r.out.find("+50.0%"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("holds only aggregates (no per-repetition rows): no test is possible"), std::string::npos)
      << r.err;
}

TEST_F(BenchCompareCli, HtmlReport) {
  SyntheticRun slower;
  slower.factor = 1.10;
  const std::string html = files::join(dir_, "report.html");
  const CliResult r = compare(slower, "--html " + html);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("wrote " + html), std::string::npos) << r.out;
  const std::string text = test::read_text(html);
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("stroke-dasharray"), std::string::npos);  // the base curve
  EXPECT_NE(text.find("<tr class=\"regression\"><td>" + kNames[0]), std::string::npos);
  EXPECT_NE(text.find("rms_norm · tiny · fp32 · fwd · cpu"), std::string::npos);  // a chart per group
  EXPECT_EQ(text.find("<script"), std::string::npos);
  EXPECT_EQ(text.find("http://"), text.find("http://www.w3.org/2000/svg"));  // no external resource
}

TEST_F(BenchCompareCli, UnreadableReportsFailWithOneLine) {
  const std::string base = write("base.json", SyntheticRun{});
  expect_one_line_error(run_cli("bench-compare " + base + " " + dir_ + "/missing.json"), 1,
                        "error: " + dir_ + "/missing.json: cannot be read");
  const std::string bad = files::join(dir_, "bad.json");
  std::ofstream(bad) << "{\"benchmarks\": [";
  expect_one_line_error(run_cli("bench-compare " + bad + " " + base), 1, "error: " + bad + ": not valid JSON");
  const std::string other = files::join(dir_, "other.json");
  std::ofstream(other) << "{\"results\": []}";
  expect_one_line_error(run_cli("bench-compare " + base + " " + other), 1,
                        other + ": no 'benchmarks' array (not a Google Benchmark JSON report)");
  const std::string untimed = files::join(dir_, "untimed.json");
  std::ofstream(untimed) << R"({"benchmarks": [{"name": "x", "run_type": "iteration", "time_unit": "ms"}]})";
  expect_one_line_error(run_cli("bench-compare " + base + " " + untimed), 1,
                        untimed + ": benchmarks[0] 'x': 'real_time' is missing or not a number");
}

TEST_F(BenchCompareCli, HelpAndUsageErrors) {
  CliResult r = run_cli("bench-compare --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("usage: gemma4-conform bench-compare BASE.json NEW.json [--threshold PCT] [--html FILE]"),
            std::string::npos)
      << r.out;
  r = run_cli("--help");
  EXPECT_NE(r.out.find("  bench-compare  compare two gemma4-bench JSON reports"), std::string::npos) << r.out;

  const std::string base = write("base.json", SyntheticRun{});
  expect_one_line_error(run_cli("bench-compare " + base), 2, "give exactly two reports: BASE.json NEW.json");
  expect_one_line_error(run_cli("bench-compare " + base + " " + base + " " + base), 2, "give exactly two reports");
  expect_one_line_error(run_cli("bench-compare " + base + " " + base + " --threshold ten"), 2,
                        "--threshold must be a non-negative percentage, got 'ten'");
  expect_one_line_error(run_cli("bench-compare " + base + " " + base + " --threshold"), 2, "needs a value (PCT)");
  expect_one_line_error(run_cli("bench-compare " + base + " " + base + " --frobnicate"), 2,
                        "unknown option '--frobnicate'");
}

}  // namespace
}  // namespace gemma4
