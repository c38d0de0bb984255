// `gemma4-conform scoreboard`: the scoreboard is the Python package's (gemma4_conform/scoreboard.py):
// its subjects are Python models and the suite's runners are reached from there. This command runs
// it, so that both entry points are one implementation: the interpreter is $GEMMA4_PYTHON (default
// python3), and PYTHONPATH gets the build tree's package (beside this binary, ../python) and the
// subjects' adapters of the data directory (impl/python, impl/third_party), before the caller's own.
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <iostream>

#include "golden/data_dir.h"
#include "reference/error.h"
#include "reference/files.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {

int scoreboard_command(const std::vector<std::string>& args) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string paths;
  if (n > 0) {
    const std::string exe(self, static_cast<size_t>(n));
    paths = files::join(exe.substr(0, exe.rfind('/')), "../python") + ":";
  }
  const std::string data = golden::data_dir();
  paths += files::join(data, "impl/python") + ":" + files::join(data, "impl/third_party");
  if (const char* caller = std::getenv("PYTHONPATH")) paths += std::string(":") + caller;
  setenv("PYTHONPATH", paths.c_str(), 1);

  const char* python = std::getenv("GEMMA4_PYTHON");
  const std::string interpreter = python && *python ? python : "python3";
  std::vector<std::string> argv_strings{interpreter, "-m", "gemma4_conform", "scoreboard"};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::cout.flush();
  execvp(argv[0], argv.data());
  throw Error("cannot run " + interpreter + " -m gemma4_conform scoreboard (set GEMMA4_PYTHON to the .venv's python)");
}

}  // namespace gemma4::cli
