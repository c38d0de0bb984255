#include "conformance/child_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "reference/error.h"

extern char** environ;

namespace gemma4::conformance {
namespace {

using Clock = std::chrono::steady_clock;

// This process's environment with `extra` added or replaced, as "NAME=value" strings.
std::vector<std::string> environment_with(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (!extra.count(name)) out.push_back(entry);
  }
  for (const auto& [name, value] : extra) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

pid_t spawn(const ChildJob& job) {
  if (job.command.empty()) throw Error("a child process without a command");
  std::vector<std::string> argv = job.command;
  const std::string& program = argv.front();
  std::vector<std::string> env = environment_with(job.env);
  std::vector<char*> argv_p = pointers(argv), env_p = pointers(env);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, job.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int error = posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv_p.data(), env_p.data());
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) throw Error("cannot start " + program + ": " + std::strerror(error));
  return pid;
}

}  // namespace

void run_children(const std::vector<ChildJob>& jobs, int parallel, double timeout_seconds,
                  const std::function<void(size_t index, const ChildResult& result)>& done) {
  struct Running {
    size_t index;
    pid_t pid;
    Clock::time_point start;
    bool killed = false;
  };
  std::vector<Running> running;
  size_t next = 0;
  while (next < jobs.size() || !running.empty()) {
    while (next < jobs.size() && static_cast<int>(running.size()) < std::max(1, parallel)) {
      running.push_back({next, spawn(jobs[next]), Clock::now()});
      ++next;
    }
    bool reaped = false;
    for (size_t i = 0; i < running.size();) {
      Running& r = running[i];
      const double seconds = std::chrono::duration<double>(Clock::now() - r.start).count();
      if (!r.killed && seconds > timeout_seconds) {
        kill(r.pid, SIGKILL);
        r.killed = true;
      }
      int status = 0;
      if (waitpid(r.pid, &status, WNOHANG) != r.pid) {
        ++i;
        continue;
      }
      ChildResult result;
      result.seconds = seconds;
      if (r.killed) {
        result.outcome = ChildOutcome::kKilledByTimeout;
      } else if (WIFEXITED(status)) {
        result.outcome = ChildOutcome::kExited;
        result.exit_code = WEXITSTATUS(status);
      } else {
        result.outcome = ChildOutcome::kCrashed;
        result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      }
      const size_t index = r.index;
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      done(index, result);
      reaped = true;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace gemma4::conformance
