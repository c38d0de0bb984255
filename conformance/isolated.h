#pragma once
// Suite runs in child processes (the engine's --isolate and its ISA levels): each (backend, device,
// dtype) runs as a child `conform` of an explicit worker (the CLI, or the Python package for
// backends made in Python) and its report is read back, so that a backend that crashes or hangs
// becomes a failing run with the reason, and the runs after it still happen.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "conformance/report.h"

namespace gemma4::conformance {

struct IsolatedJob {
  std::vector<std::string> command;        // "<worker...> conform --backend NAME --device D --dtype T ...", no --report
  std::map<std::string, std::string> env;  // added to the child's environment
  Run label;                               // subject, device and dtype of the run, for when no report comes back
};

// Runs each job as `COMMAND --report <work_dir>/<label>.<i>.json`, at most `parallel`
// at once, each killed after `timeout_seconds`; calls `done` (on this thread) as each finishes with
// the child's run, or with a run whose error says it crashed (the signal), timed out, or exited
// without a report, naming the child's log.
void run_isolated(const std::vector<IsolatedJob>& jobs, int parallel, double timeout_seconds,
                  const std::string& work_dir, const std::function<void(size_t index, Run run)>& done);

}  // namespace gemma4::conformance
