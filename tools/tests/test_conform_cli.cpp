// `gemma4-conform conform` and `backends` through the real binary: the reference passes every
// category, the op-level checks fail where a window or determinism bug shows, the example plugin
// passes through --backend-lib, and bad plugins and options give one-line errors. That each faulty
// backend fails in the categories it declares, and each variant passes, is `calibrate`'s test.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "conformance/check.h"
#include "impl/plugin_abi.h"
#include "reference/files.h"
#include "tools/tests/cli_runner.h"

namespace gemma4 {
namespace {

using test::CliResult;
using test::expect_one_line_error;
using test::run_cli;

struct ConformRun {
  CliResult cli;
  nlohmann::json report;  // the report's one run (conformance/report.h), or the whole report when several
};

ConformRun conform(const std::string& args) {
  const std::string report = files::join(files::make_temp_directory("gemma4_conform_"), "report.json");
  ConformRun r{run_cli("conform " + args + " --report " + report), {}};
  std::ifstream in(report);
  if (in) r.report = nlohmann::json::parse(in);
  if (r.report.contains("runs") && r.report.at("runs").size() == 1) r.report = r.report.at("runs").at(0);
  return r;
}

// Each row's status keyed by test and case: what two runs of the same backend must agree on.
std::map<std::string, std::string> statuses(const nlohmann::json& run) {
  std::map<std::string, std::string> out;
  for (const auto& r : run.at("results")) out[r.at("test").get<std::string>() + " " + r.at("case").get<std::string>()] = r.at("status");
  return out;
}

// status counts per category
std::map<std::string, std::map<std::string, int>> by_category(const nlohmann::json& report) {
  std::map<std::string, std::map<std::string, int>> out;
  for (const auto& r : report.at("results")) ++out[r.at("category")][r.at("status")];
  return out;
}

// real_size is left out of these runs (kSkipRealSize): CTest's real_size runs it, minutes on two cores.
const char* const kSkipRealSize = " --filter '^(?!real_size/)'";

void expect_every_category_passes(const ConformRun& run) {
  EXPECT_EQ(run.cli.exit_code, 0) << run.cli.out.substr(run.cli.out.size() > 3000 ? run.cli.out.size() - 3000 : 0);
  const auto counts = by_category(run.report);
  for (const conformance::CategoryInfo& info : conformance::categories()) {
    const std::string c = info.name;
    if (c == "real_size") continue;
    ASSERT_TRUE(counts.count(c)) << c;
    EXPECT_GT(counts.at(c).count("pass") ? counts.at(c).at("pass") : 0, 0) << c;
    EXPECT_EQ(counts.at(c).count("fail"), 0u) << c;
  }
  for (const auto& r : run.report.at("results")) {
    for (const char* key : {"test", "category", "status", "metric", "value", "bound"}) EXPECT_TRUE(r.contains(key)) << key;
  }
}

TEST(ConformCli, ReferencePassesEveryCategory) {
  expect_every_category_passes(conform(std::string("--backend reference") + kSkipRealSize));
}

TEST(ConformCli, ExamplePluginPassesThroughBackendLib) {
  const ConformRun run = conform(std::string("--backend-lib ") + GEMMA4_EXAMPLE_PLUGIN + kSkipRealSize);
  EXPECT_EQ(run.report.value("subject", ""), "example-plugin");
  expect_every_category_passes(run);
}

TEST(ConformCli, UnsupportedIsReportedNotFailed) {
  // The example plugin declares no f16: every check is not_supported, and nothing fails.
  const ConformRun run =
      conform(std::string("--backend-lib ") + GEMMA4_EXAMPLE_PLUGIN + " --dtype f16 --filter '^golden/op/' --verbose");
  EXPECT_EQ(run.cli.exit_code, 0) << run.cli.out;
  ASSERT_FALSE(run.report.at("results").empty());
  for (const auto& r : run.report.at("results")) EXPECT_EQ(r.at("status"), "not_supported") << r.dump();
  EXPECT_NE(run.cli.out.find("not supported (dtype Half)"), std::string::npos) << run.cli.out;
}

TEST(ConformCli, WritesJunitXml) {
  const std::string xml = files::join(files::make_temp_directory("gemma4_conform_"), "suite.xml");
  const CliResult r = run_cli("conform --backend reference --filter '^bad_input/' --junit " + xml);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const std::string text = test::read_text(xml);
  EXPECT_NE(text.find("<testsuites"), std::string::npos) << text;
  EXPECT_NE(text.find("testsuite name=\"reference, cpu, f32\""), std::string::npos) << text;
  EXPECT_NE(text.find("testcase classname=\"conform.bad_input\" name=\"bad_input/op/nan-query\""), std::string::npos) << text;
}

// By default only failing rows print (then the summary and where the report is); --verbose
// prints every row. The faulty backend's failing rows are the negative control.
TEST(ConformCli, PrintsFailingRowsUnlessVerbose) {
  const std::string filter = " --filter '^op_sweep/attention/sliding'";
  ConformRun quiet = conform("--backend reference" + filter);
  EXPECT_EQ(quiet.cli.exit_code, 0) << quiet.cli.out;
  EXPECT_EQ(quiet.cli.out.find(" OK"), std::string::npos) << quiet.cli.out;
  EXPECT_NE(quiet.cli.out.find("summary by category"), std::string::npos) << quiet.cli.out;
  EXPECT_NE(quiet.cli.out.find("report: "), std::string::npos) << quiet.cli.out;
  ASSERT_FALSE(quiet.report.at("results").empty());  // the report still has every row

  const ConformRun verbose = conform("--backend reference --verbose" + filter);
  EXPECT_NE(verbose.cli.out.find(" OK"), std::string::npos) << verbose.cli.out;

  const ConformRun faulty = conform("--backend faulty-no-window" + filter);
  EXPECT_EQ(faulty.cli.exit_code, 1);
  EXPECT_NE(faulty.cli.out.find(" FAIL"), std::string::npos) << faulty.cli.out;
  EXPECT_EQ(faulty.cli.out.find(" OK"), std::string::npos) << faulty.cli.out;
}

struct FaultyCase {
  const char* backend;
  const char* category;     // where its bug must show
  const char* checks = "";  // the checks of the category that must fail ("attention_op/"); "": any
};

class FaultyBackend : public ::testing::TestWithParam<FaultyCase> {};

TEST_P(FaultyBackend, FailsInItsCategory) {
  const FaultyCase& c = GetParam();
  // The suite restricted to the bug's category, or to the checks named (the full runs are in the
  // issue notes).
  const ConformRun run =
      conform(std::string("--backend ") + c.backend + " --filter '^" + c.category + "/" + c.checks + "'");
  EXPECT_EQ(run.cli.exit_code, 1) << run.cli.out;
  const auto counts = by_category(run.report);
  ASSERT_TRUE(counts.count(c.category)) << run.cli.out;
  EXPECT_GT(counts.at(c.category).count("fail") ? counts.at(c.category).at("fail") : 0, 0) << run.cli.out;
}

std::string faulty_case_name(const ::testing::TestParamInfo<FaultyCase>& info) {
  std::string name = info.param.backend;
  for (char& ch : name) ch = ch == '-' ? '_' : ch;
  return name;
}

// The op-level checks have their own negative controls: the window bugs fail op_sweep (the attention
// op alone against the reference's), the run-dependent attention fails the attention op's own
// determinism check (forward, dK, dV and dQ over 100 repeats), not only the model-level one.
INSTANTIATE_TEST_SUITE_P(
    OpLevel, FaultyBackend,
    ::testing::Values(FaultyCase{"faulty-no-window", "op_sweep", "attention/"},
                      FaultyCase{"faulty-window-off-by-one", "op_sweep", "attention/"},
                      FaultyCase{"faulty-nondeterministic-attention", "determinism", "attention_op/"}),
    faulty_case_name);

// The window bugs show exactly where the window cuts: every result of a sliding case with w < S
// fails, and the cases with w == S or w > S (plain causal attention) pass.
TEST(ConformCli, WindowBugsFailOpSweepWhereTheWindowCuts) {
  for (const char* backend : {"faulty-no-window", "faulty-window-off-by-one"}) {
    SCOPED_TRACE(backend);
    const ConformRun run = conform(std::string("--backend ") + backend + " --filter '^op_sweep/attention/sliding-'");
    EXPECT_EQ(run.cli.exit_code, 1) << run.cli.out;
    int cut = 0, uncut = 0;
    for (const auto& r : run.report.at("results")) {
      const bool window_cuts = r.at("test").get<std::string>().find("-lt-") != std::string::npos;
      ++(window_cuts ? cut : uncut);
      EXPECT_EQ(r.at("status"), window_cuts ? "fail" : "pass") << r.dump();
    }
    EXPECT_GT(cut, 0);
    EXPECT_GT(uncut, 0);
  }
}

// Every faulty backend says where its bug must show and names its source; the variants come
// before the faulty ones, the reference first.
TEST(ConformCli, EveryFaultyBackendDeclaresWhereItFails) {
  const CliResult r = run_cli("backends");
  ASSERT_EQ(r.exit_code, 0);
  std::istringstream lines(r.out);
  int faulty = 0, variants = 0;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string name, kind;
    words >> name >> kind;
    if (kind == "variant") {
      ++variants;
      EXPECT_EQ(faulty, 0) << "variants are listed before the faulty backends: " << line;
    }
    if (kind != "faulty") continue;
    ++faulty;
    EXPECT_EQ(name.rfind("faulty-", 0), 0u) << line;
    EXPECT_NE(line.find("fails in "), std::string::npos) << line;
  }
  EXPECT_GE(faulty, 19) << r.out;   // 11 kept from the first suite, at least 8 numeric bug classes
  EXPECT_GE(variants, 5) << r.out;  // SDPA, at::rms_norm, fused q/k norm + RoPE, fused GeGLU, fp32 attention
  EXPECT_EQ(r.out.rfind("reference ", 0), 0u) << r.out;
}

// The support matrix: the reference replaces nothing, each variant and fused backend what it
// says, a KV hand-off bug its hand-off; a plugin's declared capabilities show.
TEST(ConformCli, BackendsMatrix) {
  const CliResult r = run_cli(std::string("backends --matrix --backend-lib ") + GEMMA4_EXAMPLE_PLUGIN);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> rows;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) rows[line.substr(0, line.find(' '))] = line;
  ASSERT_TRUE(rows.count("backend")) << r.out;
  auto replaces = [&](const std::string& name) {
    const std::string& row = rows[name];
    return row.substr(row.rfind("  ") + 2);
  };
  EXPECT_EQ(replaces("reference"), "none") << rows["reference"];
  EXPECT_EQ(replaces("variant-sdpa"), "attention,kv_cache") << rows["variant-sdpa"];
  EXPECT_EQ(replaces("variant-paged-kv-cache"), "kv_cache") << rows["variant-paged-kv-cache"];
  EXPECT_EQ(replaces("variant-aten-rms-norm"), "rms_norm") << rows["variant-aten-rms-norm"];
  EXPECT_EQ(replaces("faulty-thread-local-kv"), "kv_handoff") << rows["faulty-thread-local-kv"];
  EXPECT_NE(rows["example-plugin"].find("unknown (plugin)"), std::string::npos) << r.out;
  EXPECT_NE(rows["example-plugin"].find(" f32,bf16 "), std::string::npos) << rows["example-plugin"];
}

TEST(ConformCli, BadPluginsAndOptionsGiveOneLineErrors) {
  expect_one_line_error(run_cli(std::string("conform --backend-lib ") + GEMMA4_WRONG_ABI_PLUGIN), 1,
                        "plugin ABI version " + std::to_string(GEMMA4_PLUGIN_ABI_VERSION + 1) +
                            ", this gemma4-conform needs " + std::to_string(GEMMA4_PLUGIN_ABI_VERSION));
  expect_one_line_error(run_cli("conform --backend-lib /lib/x86_64-linux-gnu/libm.so.6"), 1, "no symbol gemma4_plugin_entry");
  expect_one_line_error(run_cli("conform --backend-lib /nonexistent.so"), 1, "cannot load the backend plugin");
  expect_one_line_error(run_cli("conform --backend nope"), 2, "'nope' matches no backend");
  expect_one_line_error(run_cli("conform --backend 'faulty-(' "), 2, "nor a regular expression");
  expect_one_line_error(run_cli("conform --dtype f32"), 2, "give --backend or --backend-lib");
  expect_one_line_error(run_cli("conform --backend reference --backend-lib x.so"), 1, "cannot load the backend plugin");
  expect_one_line_error(run_cli("conform --backend reference --isolate --timeout 0"), 2, "--timeout must be");
  expect_one_line_error(run_cli("conform --backend reference --steps 0"), 2, "--steps must be a whole number of at least 1");
  expect_one_line_error(run_cli("conform --backend reference --filter '('"), 1, "not a regular expression");
  expect_one_line_error(run_cli("conform --backend reference --filter nothing-matches-this"), 1, "no check matches");
  EXPECT_EQ(run_cli("conform --help").exit_code, 0);
}

// Several backends in one process: the reference and a variant pass, two faulty backends fail in
// the categories they declare, the matrix shows it, and each backend's rows are the ones its own
// run gives (a check that leaked state from one backend into the next would break the equality).
// The exit code means one thing: nonzero when a run fails, however many runs there are; with
// --expect-declared, zero when every run behaved as its backend's kind declares.
TEST(ConformCli, SeveralBackendsInOneProcessGiveTheirOwnVerdicts) {
  const std::string filter = " --filter '^(golden/op/attention-sliding|op_sweep/attention/sliding-)'";
  const std::string backends = "--backend '^(reference|variant-sdpa|faulty-no-window|faulty-attention-scale)$'";
  const ConformRun all = conform(backends + filter);
  EXPECT_EQ(all.cli.exit_code, 1) << all.cli.out;
  ASSERT_EQ(all.report.at("runs").size(), 4u) << all.report.dump().substr(0, 2000);
  EXPECT_NE(all.cli.out.find("FAIL: 2/4 runs passed"), std::string::npos) << all.cli.out;
  EXPECT_NE(all.cli.out.find("op_sweep"), std::string::npos) << all.cli.out;  // the matrix's header
  for (const auto& run : all.report.at("runs")) {
    const std::string backend = run.at("subject");
    SCOPED_TRACE(backend);
    EXPECT_EQ(run.at("passed").get<bool>(), backend.rfind("faulty-", 0) != 0);
    const ConformRun alone = conform("--backend " + backend + filter);
    EXPECT_EQ(statuses(alone.report), statuses(run));
  }
  const ConformRun declared = conform(backends + filter + " --expect-declared");
  EXPECT_EQ(declared.cli.exit_code, 0) << declared.cli.out;
  EXPECT_NE(declared.cli.out.find("PASS: 4/4 judged runs as declared in golden, op_sweep"), std::string::npos)
      << declared.cli.out;
  for (const auto& run : declared.report.at("runs")) EXPECT_EQ(run.at("declared"), "as_declared") << run.dump();
}

// One faulty backend in two dtypes fails (exit 1), as it does in one; with --expect-declared its
// failures are what it declares (exit 0). Negative control: the reference judged the same way
// passes, and a faulty backend whose declared category ran without failing is WRONG (exit 1).
TEST(ConformCli, ExitCodeDoesNotChangeMeaningWithTheNumberOfRuns) {
  const std::string filter = " --filter '^golden/op/attention-sliding'";
  EXPECT_EQ(run_cli("conform --backend faulty-no-window" + filter).exit_code, 1);
  EXPECT_EQ(run_cli("conform --backend faulty-no-window --dtype f32,bf16" + filter).exit_code, 1);
  EXPECT_EQ(run_cli("conform --backend faulty-no-window --dtype f32,bf16 --expect-declared" + filter).exit_code, 0);
  EXPECT_EQ(run_cli("conform --backend reference --dtype f32,bf16 --expect-declared" + filter).exit_code, 0);
  // faulty-attention-scale declares golden; a golden file its bug cannot move (rms_norm) passes: WRONG.
  const CliResult wrong = run_cli("conform --backend faulty-attention-scale --expect-declared --filter '^golden/op/rms_norm'");
  EXPECT_EQ(wrong.exit_code, 1) << wrong.out;
  EXPECT_NE(wrong.out.find("WRONG"), std::string::npos) << wrong.out;
}

// A category a filter left out is "not run" against the declarations, never a pass or a failure:
// faulty-checkpoint-closure (memory_flatness) is not judged by an op_sweep run.
TEST(ConformCli, CategoriesLeftOutAreNotRun) {
  const CliResult r = run_cli("conform --backend '^(reference|faulty-no-window|faulty-checkpoint-closure)$' "
                              "--expect-declared --filter '^op_sweep/attention/sliding-'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("PASS: 2/2 judged runs as declared in op_sweep; 1 runs not judged"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("not run: golden, finite_grads"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("WRONG"), std::string::npos) << r.out;
}

// A backend that crashes or hangs ends a run in one process; --isolate makes it a failing run with
// the reason, and the runs beside it still happen (the reference passes).
TEST(ConformCli, IsolateTurnsACrashOrAHangIntoAFailingRun) {
  const std::string args = std::string("--backend reference --backend-lib ") + GEMMA4_MISBEHAVING_PLUGIN +
                           " --filter '^golden/op/geglu' --isolate --timeout 20";
  ::setenv("GEMMA4_MISBEHAVE", "crash", 1);
  const ConformRun crash = conform(args);
  ::setenv("GEMMA4_MISBEHAVE", "hang", 1);
  const ConformRun hang = conform(args + " --timeout 5");
  ::unsetenv("GEMMA4_MISBEHAVE");
  const ConformRun fine = conform(args);  // the plugin is the reference otherwise: the positive control
  using Expected = std::pair<const ConformRun*, std::string>;
  for (const auto& [run, error] : {Expected{&crash, "crashed (signal 11"}, Expected{&hang, "timed out after 5 s"}}) {
    EXPECT_EQ(run->cli.exit_code, 1) << run->cli.out;
    ASSERT_EQ(run->report.at("runs").size(), 2u) << run->cli.out;
    EXPECT_TRUE(run->report.at("runs").at(0).at("passed").get<bool>()) << run->cli.out;  // the reference
    const auto& bad = run->report.at("runs").at(1);
    EXPECT_FALSE(bad.at("passed").get<bool>());
    EXPECT_NE(bad.value("error", "").find(error), std::string::npos) << bad.dump();
  }
  EXPECT_EQ(fine.cli.exit_code, 0) << fine.cli.out;
}

}  // namespace
}  // namespace gemma4
