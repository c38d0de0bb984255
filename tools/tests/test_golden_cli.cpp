// The `gemma4-conform golden` contract, through the real binary: list, generate, verify (passing,
// failing on a tampered tensor, refusing damaged files), diff, show, and usage errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>

#include "golden/golden_file.h"
#include "golden/h5_tensors.h"
#include "reference/files.h"
#include "tools/tests/cli_runner.h"

namespace gemma4 {
namespace {

using test::CliResult;
using test::expect_one_line_error;
using test::run_cli;

TEST(GoldenCli, ListPutsTinyCasesFirst) {
  const CliResult r = run_cli("golden list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("op/", 0), 0u) << r.out;
  const size_t model = r.out.find("model/"), real = r.out.find("real/");
  ASSERT_NE(model, std::string::npos);
  ASSERT_NE(real, std::string::npos);
  EXPECT_LT(r.out.find("op/"), model);
  EXPECT_LT(model, real);
  for (const char* name : {"op/rms_norm-scale", "model/e2b", "model/e4b", "model/31b", "model/26b-a4b", "real/31b-full"}) {
    EXPECT_NE(r.out.find(std::string(name) + "\n"), std::string::npos) << name;
  }
}

TEST(GoldenCli, GenerateVerifyShowDiff) {
  const std::string dir = files::make_temp_directory("gemma4_golden_cli_");
  CliResult r = run_cli("golden generate --case op/rms_norm-scale,model/26b-a4b --dtype all --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string f32 = dir + "/model/26b-a4b.f32.h5", bf16 = dir + "/model/26b-a4b.bf16.h5";
  ASSERT_TRUE(files::is_file(f32) && files::is_file(bf16) && files::is_file(dir + "/op/rms_norm-scale.f16.h5")) << r.out;

  r = run_cli("golden verify " + f32 + " " + bf16);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("PASS " + f32), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("grads/layers.2.experts.gate_up_proj"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("golden verify: 2/2 files pass"), std::string::npos) << r.out;
  // A folder names every .h5 file below it; where one file is needed, a folder is refused by name.
  r = run_cli("golden verify --quiet " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("golden verify: 6/6 files pass"), std::string::npos) << r.out;
  r = run_cli("golden check " + dir + "/model " + f32);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE((r.out + r.err).find(dir + "/model: is a folder, not a file"), std::string::npos) << r.out << r.err;

  r = run_cli("golden show " + bf16);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("truth/outputs/logits"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reduced-precision"), std::string::npos) << r.out;

  EXPECT_EQ(run_cli("golden diff " + f32 + " " + f32).exit_code, 0);
  r = run_cli("golden diff " + f32 + " " + bf16);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("attribute dtype"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expected/outputs/logits"), std::string::npos) << r.out;
}

TEST(GoldenCli, VerifyFailsOnTamperedOrDamagedFiles) {
  const std::string dir = files::make_temp_directory("gemma4_golden_cli_");
  ASSERT_EQ(run_cli("golden generate --case op/mlp-geglu --out " + dir).exit_code, 0);
  const std::string good = dir + "/op/mlp-geglu.f32.h5";

  // A tampered expected tensor: recomputation disagrees, the row and the file fail.
  golden::GoldenCase g = golden::read_golden(good);
  g.expected.at("outputs/y").view(-1)[0] += 0.5;
  const std::string tampered = dir + "/tampered.h5";
  golden::write_golden(tampered, g);
  CliResult r = run_cli("golden verify " + good + " " + tampered);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("PASS " + good), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL " + tampered), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("golden verify: 1/2 files pass"), std::string::npos) << r.out;

  const std::string truncated = dir + "/truncated.h5";
  {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  r = run_cli("golden verify " + good + " " + tampered + " " + truncated + " --report " + dir + "/v.json --junit " + dir + "/v.xml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("FAIL " + truncated), std::string::npos) << r.out;
  // One run per file in the one report: the good file passes, the tampered one fails its row, the
  // unreadable one is a run that did not complete, with the reader's reason.
  const nlohmann::json verify = nlohmann::json::parse(test::read_text(dir + "/v.json"));
  ASSERT_EQ(verify.at("runs").size(), 3u) << verify.dump();
  EXPECT_TRUE(verify.at("runs").at(0).at("passed").get<bool>());
  EXPECT_EQ(verify.at("runs").at(1).at("failed_tests"), 1);
  EXPECT_FALSE(verify.at("runs").at(2).value("error", "").empty()) << verify.at("runs").at(2).dump();
  EXPECT_NE(test::read_text(dir + "/v.xml").find("<testsuite name=\"" + truncated), std::string::npos);

  g = golden::read_golden(good);
  g.expected.at("outputs/y").view(-1)[0] = NAN;
  const std::string nan = dir + "/nan.h5";
  golden::write_golden(nan, g);
  r = run_cli("golden verify " + nan);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("'expected/outputs/y' holds NaN or infinity"), std::string::npos) << r.out;

  r = run_cli("golden verify /nonexistent.h5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("/nonexistent.h5: no such file"), std::string::npos) << r.out;
}

// golden check: a candidate written elsewhere (here: the golden's own expected/, then changed)
// passes, prints "not checked" rows under --forward-only, fails when tampered, and writes the
// JSON and JUnit reports.
TEST(GoldenCli, CheckJudgesACandidateFile) {
  const std::string dir = files::make_temp_directory("gemma4_golden_cli_");
  ASSERT_EQ(run_cli("golden generate --case op/mlp-geglu --out " + dir).exit_code, 0);
  const std::string golden_path = dir + "/op/mlp-geglu.f32.h5";
  const golden::GoldenCase g = golden::read_golden(golden_path);
  auto write_candidate = [&](const std::string& path, bool with_grads, float scale) {
    h5::File f = h5::File::create(path);
    for (const auto& [name, t] : g.expected) {
      if (with_grads || name.rfind("grads/", 0) != 0) f.write(name, name == "outputs/y" ? t * scale : t);
    }
  };
  const std::string good = dir + "/good.h5", fwd = dir + "/fwd.h5", bad = dir + "/bad.h5";
  write_candidate(good, true, 1.0f);
  write_candidate(fwd, false, 1.0f);
  write_candidate(bad, true, 1.01f);

  CliResult r = run_cli("golden check " + golden_path + " " + good + " --report " + dir + "/r.json --junit " + dir + "/r.xml");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("PASS " + good), std::string::npos) << r.out;
  std::ifstream json(dir + "/r.json"), xml(dir + "/r.xml");
  const std::string json_text((std::istreambuf_iterator<char>(json)), {}), xml_text((std::istreambuf_iterator<char>(xml)), {});
  // The one report's schema (conformance/report.h): a run whose rows are the tensors, all passing.
  const nlohmann::json report = nlohmann::json::parse(json_text);
  EXPECT_EQ(report.at("tool"), "golden check");
  ASSERT_EQ(report.at("runs").size(), 1u) << json_text;
  EXPECT_TRUE(report.at("runs").at(0).at("passed").get<bool>()) << json_text;
  EXPECT_EQ(report.at("runs").at(0).at("failed_tests"), 0) << json_text;
  EXPECT_NE(xml_text.find("classname=\"golden check.golden\" name=\"outputs/y\""), std::string::npos) << xml_text;
  r = run_cli("golden check " + golden_path + " " + bad + " --report " + dir + "/bad.json --junit " + dir + "/bad.xml");
  EXPECT_EQ(r.exit_code, 1) << r.out;  // the negative control: the tampered output fails in both reports
  const nlohmann::json bad_report = nlohmann::json::parse(test::read_text(dir + "/bad.json"));
  EXPECT_EQ(bad_report.at("runs").at(0).at("failed_tests"), 1) << bad_report.dump();
  EXPECT_NE(test::read_text(dir + "/bad.xml").find("<failure message=\"max_abs"), std::string::npos);

  r = run_cli("golden check " + golden_path + " " + fwd + " --forward-only");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("not checked (not in the candidate (forward only))"), std::string::npos) << r.out;
  r = run_cli("golden check " + golden_path + " " + fwd);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("required unless --forward-only"), std::string::npos) << r.out;

  r = run_cli("golden check " + golden_path + " " + bad + " --quiet");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("outputs/y"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("grads/"), std::string::npos) << "--quiet prints only failing rows\n" << r.out;
  expect_one_line_error(run_cli("golden check " + golden_path + " " + dir + "/absent.h5"), 1, dir + "/absent.h5");
}

TEST(GoldenCli, HelpAndUsageErrors) {
  for (const char* sub : {"golden --help", "golden list --help", "golden generate --help", "golden verify --help", "golden check --help",
                          "golden diff --help", "golden show --help"}) {
    const CliResult r = run_cli(sub);
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find("usage: gemma4-conform golden"), std::string::npos) << sub << "\n" << r.out;
  }
  const std::string out = " --out " + files::make_temp_directory("gemma4_golden_cli_");
  expect_one_line_error(run_cli("golden generate" + out), 2, "name cases with --case");
  expect_one_line_error(run_cli("golden generate --case op/nope" + out), 1, "unknown golden case 'op/nope'");
  expect_one_line_error(run_cli("golden generate --case op/mlp-geglu --dtype f64" + out), 2, "--dtype must be");
  expect_one_line_error(run_cli("golden verify"), 2, "name at least one golden file");
  expect_one_line_error(run_cli("golden diff a.h5"), 2, "exactly two files");
  expect_one_line_error(run_cli("golden check a.h5"), 2, "name a golden file and a candidate file");
  expect_one_line_error(run_cli("golden frobnicate"), 2, "unknown golden subcommand");
}

}  // namespace
}  // namespace gemma4
