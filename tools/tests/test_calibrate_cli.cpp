// `gemma4-conform calibrate` through the real binary: a legitimate variant and a faulty backend
// come out as expected, with the separation table and JSON; backends that lie about their kind
// (a "variant" with a bug, a "faulty" backend that is correct) are caught and fail the run; bad
// options give one-line errors. The whole calibration runs as its own CTest test (`calibrate`).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "reference/files.h"
#include "tools/tests/cli_runner.h"

namespace gemma4 {
namespace {

using test::CliResult;
using test::expect_one_line_error;
using test::run_cli;

struct Calibration {
  CliResult cli;
  nlohmann::json report;
};

Calibration calibrate(const std::string& args) {
  const std::string dir = files::make_temp_directory("gemma4_calibrate_test_");
  const std::string report = files::join(dir, "calibration.json");
  // real_size: CTest's real_size tests run it (minutes per backend on two cores).
  Calibration c{run_cli("calibrate --jobs 1 --skip-categories real_size --work-dir " + dir + " --report " + report +
                        " " + args),
                {}};
  std::ifstream in(report);
  if (in) c.report = nlohmann::json::parse(in);
  return c;
}

TEST(CalibrateCli, AVariantPassesAndAFaultyBackendFailsWhereItSays) {
  const Calibration c = calibrate("--dtype f32,bf16 --backends '^(variant-fused-geglu|faulty-one-plus-w-norm)$'");
  EXPECT_EQ(c.cli.exit_code, 0) << c.cli.out << c.cli.err;
  ASSERT_EQ(c.report.at("runs").size(), 4u) << c.cli.out;
  for (const auto& run : c.report.at("runs")) {
    EXPECT_TRUE(run.at("as_expected").get<bool>()) << run.dump();
    EXPECT_EQ(run.at("expected"), run.at("kind") == "variant" ? "pass" : "fail") << run.dump();
  }
  // The separation table: per dtype and category, the golden rows separate with margin.
  bool golden_rows = false;
  for (const auto& s : c.report.at("separation")) {
    if (s.at("category") != "golden") continue;
    golden_rows = true;
    EXPECT_TRUE(s.at("separated").get<bool>()) << s.dump();
    EXPECT_LE(s.at("worst_legitimate_ratio").get<double>(), 1.0) << s.dump();
    EXPECT_GT(s.at("weakest_faulty_ratio").get<double>(), 1.0) << s.dump();
    EXPECT_EQ(s.at("weakest_faulty_by"), "faulty-one-plus-w-norm");
  }
  EXPECT_TRUE(golden_rows);
  EXPECT_NE(c.cli.out.find("separation"), std::string::npos);
  EXPECT_NE(c.cli.out.find("PASS: 4/4 runs as expected"), std::string::npos) << c.cli.out;
}

// A category the run left out is no separation row to fail: faulty-decode-ignores-window declares
// decode and real_size, and only decode is judged here.
TEST(CalibrateCli, ACategoryLeftOutIsNotCountedAsNotSeparated) {
  const Calibration c = calibrate("--dtype f32 --categories decode --backends '^faulty-decode-ignores-window$'");
  EXPECT_EQ(c.cli.exit_code, 0) << c.cli.out << c.cli.err;
  bool decode_row = false;
  for (const auto& s : c.report.at("separation")) {
    EXPECT_TRUE(s.at("separated").get<bool>()) << s.dump();
    if (s.at("category") == "decode") {
      decode_row = true;
      EXPECT_GT(s.at("weakest_faulty_ratio").get<double>(), 1.0) << s.dump();
    }
  }
  EXPECT_TRUE(decode_row);
  EXPECT_EQ(c.cli.out.find("NOT SEPARATED"), std::string::npos) << c.cli.out;
}

// The negative controls of the calibration itself: a bug that claims to be legitimate, and a
// correct backend that claims a bug.
TEST(CalibrateCli, BackendsThatLieAboutTheirKindAreCaught) {
  const Calibration c = calibrate(std::string("--dtype f32 --backends '^$' --backend-lib ") + GEMMA4_MISLABELLED_VARIANT +
                                  "," + GEMMA4_MISLABELLED_FAULTY);
  EXPECT_EQ(c.cli.exit_code, 1) << c.cli.out << c.cli.err;
  ASSERT_EQ(c.report.at("runs").size(), 2u) << c.cli.out;
  for (const auto& run : c.report.at("runs")) {
    EXPECT_FALSE(run.at("as_expected").get<bool>()) << run.dump();
    if (run.at("subject") == "mislabelled-variant") {
      EXPECT_NE(run.at("finding").get<std::string>().find("FAILS"), std::string::npos) << run.dump();
    } else {
      EXPECT_NE(run.at("finding").get<std::string>().find("PASSES in golden"), std::string::npos) << run.dump();
    }
  }
  for (const auto& s : c.report.at("separation")) {
    if (s.at("category") == "golden") EXPECT_FALSE(s.at("separated").get<bool>()) << s.dump();
  }
  EXPECT_NE(c.cli.out.find("FAIL: 0/2 runs as expected"), std::string::npos) << c.cli.out;
}

// The runs happen in this process; --isolate runs each in a child `conform`. Both must give the
// same rows and the same separation table (a backend leaking state into the next run in one
// process would make them differ).
TEST(CalibrateCli, InProcessAndIsolatedRunsAgree) {
  const std::string args = "--dtype f32 --backends '^(variant-sdpa|faulty-attention-scale|faulty-no-window)$'";
  const Calibration here = calibrate(args), isolated = calibrate(args + " --isolate");
  EXPECT_EQ(here.cli.exit_code, 0) << here.cli.out;
  EXPECT_EQ(isolated.cli.exit_code, 0) << isolated.cli.out;
  EXPECT_NE(here.cli.out.find("3 in this process, 0 in child processes"), std::string::npos) << here.cli.out;
  EXPECT_NE(isolated.cli.out.find("0 in this process, 3 in child processes"), std::string::npos) << isolated.cli.out;
  ASSERT_EQ(here.report.at("runs").size(), 3u);
  ASSERT_EQ(isolated.report.at("runs").size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto& a = here.report.at("runs").at(i);
    const auto& b = isolated.report.at("runs").at(i);
    EXPECT_EQ(a.at("subject"), b.at("subject"));
    EXPECT_EQ(a.at("finding"), b.at("finding"));
    ASSERT_EQ(a.at("results").size(), b.at("results").size()) << a.at("subject");
    for (size_t r = 0; r < a.at("results").size(); ++r) {
      for (const char* key : {"test", "case", "status", "value"}) {
        EXPECT_EQ(a.at("results").at(r).at(key), b.at("results").at(r).at(key)) << key << " " << a.at("results").at(r).dump();
      }
    }
  }
  EXPECT_EQ(here.report.at("separation"), isolated.report.at("separation"));
}

TEST(CalibrateCli, BadOptionsGiveOneLineErrors) {
  expect_one_line_error(run_cli("calibrate --dtype f8"), 2, "--dtype must be f32, bf16 or f16, got 'f8'");
  expect_one_line_error(run_cli("calibrate --isa AVX9000"), 1, "ISA level 'AVX9000' is not offered by this CPU");
  expect_one_line_error(run_cli("calibrate --backends '('"), 1, "not a regular expression");
  expect_one_line_error(run_cli("calibrate --backends nothing-matches"), 1, "no backend matches");
  expect_one_line_error(run_cli("calibrate --jobs 0"), 2, "--jobs must be a whole number of at least 1");
  expect_one_line_error(run_cli("calibrate --timeout -1"), 2, "--timeout must be a positive number of seconds");
  expect_one_line_error(run_cli("calibrate --steps 2x"), 2, "--steps must be a whole number of at least 1, got '2x'");
  expect_one_line_error(run_cli(std::string("calibrate --backend-lib ") + GEMMA4_EXAMPLE_PLUGIN), 1,
                        "calibrate needs a variant or a faulty backend");
  EXPECT_EQ(run_cli("calibrate --help").exit_code, 0);
}

}  // namespace
}  // namespace gemma4
