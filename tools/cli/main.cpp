// gemma4-conform: the command-line entry point. The commands and their dispatch are in
// dispatch.cpp (shared with the Python package); every error becomes one line on stderr and a
// non-zero exit (2 for usage, 1 otherwise).
#include <unistd.h>

#include <string>
#include <vector>

#include "golden/data_dir.h"
#include "tools/cli/commands.h"

namespace {

// This executable's path: the worker of the engine's child processes, and where an installed
// gemma4-conform finds its data.
std::string executable_path(const char* argv0) {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string(argv0);
}

// An installed gemma4-conform (<prefix>/bin) reads the data installed beside it
// (<prefix>/share/gemma4_conformance); one in a build tree reads its source tree.
void use_installed_data(const std::string& executable) {
  const std::string installed = gemma4::golden::installed_data_dir(executable);
  if (!installed.empty()) gemma4::golden::set_data_dir(installed);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string executable = executable_path(argv[0]);
  use_installed_data(executable);
  return gemma4::cli::run_command({"gemma4-conform", {executable}}, std::vector<std::string>(argv + 1, argv + argc));
}
