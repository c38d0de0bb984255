#pragma once
// Suite runs in child processes: `conform --isolate` and `calibrate --isolate` (and calibrate's
// ISA levels) run each (backend, dtype, device) as a child `conform` of this executable and read
// back its report, so that a backend that crashes or hangs becomes a failing run with the reason,
// and the runs after it still happen.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "conformance/report.h"

namespace gemma4::conformance {

struct IsolatedJob {
  std::vector<std::string> conform_args;   // "--backend NAME --device D --dtype T [--filter F]", no --report
  std::map<std::string, std::string> env;  // added to the child's environment
  Run label;                               // subject, device and dtype of the run, for when no report comes back
};

// Runs each job as `<this executable> conform ARGS --report <work_dir>/<i>.json`, at most `parallel`
// at once, each killed after `timeout_seconds`; calls `done` (on this thread) as each finishes with
// the child's run, or with a run whose error says it crashed (the signal), timed out, or exited
// without a report, naming the child's log.
void run_isolated(const std::vector<IsolatedJob>& jobs, int parallel, double timeout_seconds,
                  const std::string& work_dir, const std::function<void(size_t index, Run run)>& done);

}  // namespace gemma4::conformance
