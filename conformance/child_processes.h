#pragma once
// Running commands as child processes, a few at a time, each with a deadline: the engine runs one
// `conform` per backend, device and dtype this way when asked to isolate them (a crash or a hang
// becomes a failing run instead of the end of the command), and a CPU ISA level other than the
// native one too, since oneDNN reads its ISA limit once per process.
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gemma4::conformance {

struct ChildJob {
  std::vector<std::string> command;         // the program (a path, or a name looked up on PATH) and its arguments
  std::map<std::string, std::string> env;   // added to (or replacing in) this process's environment
  std::string log_path;                     // stdout and stderr go here
};

enum class ChildOutcome { kExited, kKilledByTimeout, kCrashed, kNotStarted };

struct ChildResult {
  ChildOutcome outcome = ChildOutcome::kNotStarted;
  int exit_code = -1;  // kExited only
  int signal = 0;      // kCrashed only: the signal that ended it
  double seconds = 0;
};

// Runs every job, at most `parallel` at once, each killed after `timeout_seconds`; calls `done`
// (on this thread) as each finishes, with its index into `jobs`.
void run_children(const std::vector<ChildJob>& jobs, int parallel, double timeout_seconds,
                  const std::function<void(size_t index, const ChildResult& result)>& done);

}  // namespace gemma4::conformance
