// The CI performance gate, tested end to end on the CPU: the tiny rms_norm and geglu benchmarks
// run briefly with 9 repetitions; bench-compare must pass the run against itself and flag a copy
// of it in which every repetition took 1.5 times as long.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "reference/files.h"
#include "tools/tests/cli_runner.h"

namespace gemma4 {
namespace {

using nlohmann::json;
using test::CliResult;
using test::run_cli;

TEST(BenchGate, PassesAnIdenticalRunAndFlagsASlowdown) {
  const std::string dir = files::make_temp_directory("gemma4_bench_gate_");
  const std::string base = files::join(dir, "base.json"), slow = files::join(dir, "slow.json");
  // "0.01s": Google Benchmark >= 1.8 wants the unit; gemma4-bench drops it for older versions.
  const std::string bench = std::string(GEMMA4_BENCH) +
                            " --benchmark_filter='^(rms_norm|geglu)/reference/cpu/tiny/' --benchmark_repetitions=9"
                            " --benchmark_min_time=0.01s --benchmark_out_format=json --benchmark_out=" + base +
                            " >" + files::join(dir, "bench.txt") + " 2>&1";
  ASSERT_EQ(std::system(bench.c_str()), 0) << test::read_text(files::join(dir, "bench.txt"));

  json report = json::parse(test::read_text(base));
  size_t repetitions = 0;
  for (json& row : report["benchmarks"]) {
    if (row.value("run_type", "") != "iteration" || row.value("error_occurred", false)) continue;
    row["real_time"] = row["real_time"].get<double>() * 1.5;
    row["cpu_time"] = row["cpu_time"].get<double>() * 1.5;
    ++repetitions;
  }
  // 2 ops x 2 S x 2 directions x 9 repetitions.
  ASSERT_EQ(repetitions, 72u) << "gemma4-bench's JSON must keep the per-repetition rows (Google Benchmark "
                                 "DisplayAggregatesOnly, not ReportAggregatesOnly): bench-compare tests them";
  std::ofstream(slow) << report.dump(1);

  CliResult r = run_cli("bench-compare " + base + " " + base);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("8 benchmarks: 8 same"), std::string::npos) << r.out;

  r = run_cli("bench-compare " + base + " " + slow);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("regression"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gemma4
