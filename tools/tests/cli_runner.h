#pragma once
// Runs the real gemma4-conform binary (GEMMA4_CLI) for the CLI contract tests.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "reference/files.h"

namespace gemma4::test {

struct CliResult {
  int exit_code;
  std::string out, err;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline CliResult run_cli(const std::string& args) {
  const std::string dir = files::make_temp_directory("gemma4_cli_");
  const std::string out = files::join(dir, "stdout"), err = files::join(dir, "stderr");
  const int status = std::system((std::string(GEMMA4_CLI) + " " + args + " >" + out + " 2>" + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out), read_text(err)};
}

// A failure: the expected exit code and one line on stderr that contains `phrase`.
inline void expect_one_line_error(const CliResult& r, int exit_code, const std::string& phrase) {
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  EXPECT_NE(r.err.find(phrase), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace gemma4::test
