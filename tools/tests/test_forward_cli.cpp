// The `gemma4-conform forward` contract, through the real binary: the output layout, exit codes,
// and one-line reasons on bad input (never an exception trace).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "golden/h5_tensors.h"
#include "reference/files.h"
#include "reference/safetensors.h"

namespace gemma4 {
namespace {

const std::string kCase = std::string(GEMMA4_SOURCE_DIR) + "/golden/transformers/e2b_like";

struct Result {
  int exit_code;
  std::string out, err;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result run_cli(const std::string& args) {
  const std::string dir = files::make_temp_directory("gemma4_cli_");
  const std::string out = files::join(dir, "stdout"), err = files::join(dir, "stderr");
  const int status = std::system((std::string(GEMMA4_CLI) + " " + args + " >" + out + " 2>" + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
}

// A failure: the expected exit code and one line on stderr that contains `phrase`.
void expect_one_line_error(const Result& r, int exit_code, const std::string& phrase) {
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  EXPECT_NE(r.err.find(phrase), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(ForwardCli, WritesTheContractLayout) {
  const std::string out = files::join(files::make_temp_directory("gemma4_cli_"), "out.h5");
  const Result r = run_cli("forward --model " + kCase + " --inputs " + kCase + "/inputs.safetensors --out " + out +
                           " --checkpoint --kv-key layer-index");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const h5::File ours = h5::File::open_read(out), expected = h5::File::open_read(kCase + "/expected.h5");
  EXPECT_EQ(ours.read("logits").sizes(), expected.read("logits").sizes());
  EXPECT_EQ(ours.children("hidden_states"), expected.children("hidden_states"));
  EXPECT_EQ(ours.children("grads"), expected.children("grads"));  // named by checkpoint key
  EXPECT_NEAR(ours.read("loss").item<double>(), expected.read("loss").item<double>(), 1e-4);
  EXPECT_EQ(ours.attr_string("/", "generator").rfind("reference ", 0), 0u);
  EXPECT_EQ(ours.attr_string("/", "kv_key"), "layer-index");
}

TEST(ForwardCli, WithoutLabelsNoLossNoGrads) {
  const std::string dir = files::make_temp_directory("gemma4_cli_");
  const std::string out = files::join(dir, "out.h5");
  const SafetensorsFile full(kCase + "/inputs.safetensors");
  write_safetensors(dir + "/ids_only.safetensors", {{"input_ids", full.read("input_ids")}});
  const Result r = run_cli("forward --model " + kCase + " --inputs " + dir + "/ids_only.safetensors --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const h5::File ours = h5::File::open_read(out);
  EXPECT_TRUE(ours.exists("logits"));
  EXPECT_FALSE(ours.exists("loss"));
  EXPECT_FALSE(ours.exists("grads"));
}

TEST(ForwardCli, Help) {
  const Result r = run_cli("forward --help");
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
