// The `gemma4-conform forward` contract, through the real binary: the output layout, exit codes,
// and one-line reasons on bad input (never an exception trace).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "golden/h5_tensors.h"
#include "tools/tests/cli_runner.h"
#include "reference/files.h"
#include "reference/safetensors.h"

namespace gemma4 {
namespace {

const std::string kCase = std::string(GEMMA4_SOURCE_DIR) + "/golden/transformers/e2b_like";

using test::CliResult;
using test::expect_one_line_error;
using test::run_cli;

TEST(ForwardCli, WritesTheContractLayout) {
  const std::string out = files::join(files::make_temp_directory("gemma4_cli_"), "out.h5");
  const CliResult r = run_cli("forward --model " + kCase + " --inputs " + kCase + "/inputs.safetensors --out " + out +
                           " --checkpoint --kv-key layer-index");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const h5::File ours = h5::File::open_read(out), golden = h5::File::open_read(kCase + "/golden.f32.h5");
  EXPECT_EQ(ours.read("logits").sizes(), golden.read("expected/outputs/logits").sizes());
  EXPECT_EQ(ours.children("hidden_states"), golden.children("expected/outputs/hidden_states"));
  // Named by checkpoint key: the golden file's names (relative to the text model) with the
  // ConditionalGeneration prefix.
  std::vector<std::string> keys;
  for (const std::string& name : golden.children("expected/grads")) keys.push_back("model.language_model." + name);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(ours.children("grads"), keys);
  EXPECT_NEAR(ours.read("loss").item<double>(), golden.read("expected/outputs/loss").item<double>(), 1e-4);
  EXPECT_EQ(ours.attr_string("/", "generator").rfind("reference ", 0), 0u);
  EXPECT_EQ(ours.attr_string("/", "kv_key"), "layer-index");
}

TEST(ForwardCli, WithoutLabelsNoLossNoGrads) {
  const std::string dir = files::make_temp_directory("gemma4_cli_");
  const std::string out = files::join(dir, "out.h5");
  const SafetensorsFile full(kCase + "/inputs.safetensors");
  write_safetensors(dir + "/ids_only.safetensors", {{"input_ids", full.read("input_ids")}});
  const CliResult r = run_cli("forward --model " + kCase + " --inputs " + dir + "/ids_only.safetensors --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const h5::File ours = h5::File::open_read(out);
  EXPECT_TRUE(ours.exists("logits"));
  EXPECT_FALSE(ours.exists("loss"));
  EXPECT_FALSE(ours.exists("grads"));
}

TEST(ForwardCli, Help) {
  const CliResult r = run_cli("forward --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--kv-key layer-index|layer-type"), std::string::npos);
  EXPECT_EQ(run_cli("--help").exit_code, 0);
}

TEST(ForwardCli, BadInputGivesOneLineReason) {
  const std::string inputs = " --inputs " + kCase + "/inputs.safetensors";
  const std::string out = " --out " + files::join(files::make_temp_directory("gemma4_cli_"), "o.h5");
  expect_one_line_error(run_cli("forward --model " + kCase + inputs), 2, "missing required option '--out'");
  expect_one_line_error(run_cli("forward --model " + kCase + inputs + out + " --dtype f64"), 2, "--dtype must be");
  expect_one_line_error(run_cli("forward --model /nonexistent" + inputs + out), 1, "/nonexistent: not a directory");
  expect_one_line_error(run_cli("forward --model " + kCase + " --inputs " + kCase + "/config.json" + out), 1,
                        "config.json: header length");
  expect_one_line_error(run_cli("forward --model " + kCase + inputs + " --out /nonexistent/o.h5"), 1,
                        "cannot create HDF5 file");
  expect_one_line_error(run_cli("forward --model " + kCase + inputs + out + " --kv-key kv_shared_layer_index"), 1,
                        "unknown KV key convention");
  expect_one_line_error(run_cli("forward --model " + kCase + inputs + out + " --bogus"), 2, "unknown option '--bogus'");
}

}  // namespace
}  // namespace gemma4
