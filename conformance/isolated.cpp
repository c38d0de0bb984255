#include "conformance/isolated.h"

#include <cstring>
#include <sstream>

#include "conformance/child_processes.h"
#include "reference/error.h"
#include "reference/files.h"

namespace gemma4::conformance {

void run_isolated(const std::vector<IsolatedJob>& jobs, int parallel, double timeout_seconds,
                  const std::string& work_dir, const std::function<void(size_t index, Run run)>& done) {
  std::vector<ChildJob> children;
  std::vector<std::string> reports;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Run& label = jobs[i].label;
    const std::string stem = files::join(work_dir, label.subject + "." + label.device + "." + label.dtype + "." +
                                                       std::to_string(i));
    ChildJob child;
    child.command = jobs[i].command;
    child.command.insert(child.command.end(), {"--report", stem + ".json"});
    child.env = jobs[i].env;
    child.log_path = stem + ".log";
    children.push_back(std::move(child));
    reports.push_back(stem + ".json");
  }
  run_children(children, parallel, timeout_seconds, [&](size_t i, const ChildResult& result) {
    Run run = jobs[i].label;
    const std::string log = " (log: " + children[i].log_path + ")";
    std::ostringstream seconds;
    seconds << timeout_seconds;
    if (result.outcome == ChildOutcome::kKilledByTimeout) {
      run.error = "timed out after " + seconds.str() + " s" + log;
    } else if (result.outcome == ChildOutcome::kCrashed) {
      run.error = "crashed (signal " + std::to_string(result.signal) + ", " + strsignal(result.signal) + ")" + log;
    } else if (result.exit_code != 0 && result.exit_code != 1) {
      run.error = "exited with status " + std::to_string(result.exit_code) + log;
    } else if (!files::is_file(reports[i])) {
      run.error = "wrote no report" + log;
    } else {
      try {
        const Report report = read_report(reports[i]);
        if (report.runs.size() != 1) throw Error(reports[i] + ": expected one run, found " + std::to_string(report.runs.size()));
        run = report.runs.front();
      } catch (const std::exception& e) {
        run.error = std::string("unreadable report: ") + e.what() + log;
      }
    }
    run.seconds = result.seconds;
    done(i, std::move(run));
  });
}

}  // namespace gemma4::conformance
