#include "golden/untrusted.h"

#include <ATen/Parallel.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "reference/error.h"

namespace gemma4::golden {
namespace {

// The child's verdict on the pipe: 'a' (read through), 'r' + message (refused by a gemma4::Error),
// 'u' + message (refused by another exception).
[[noreturn]] void child(const std::function<void()>& read, int fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the reader that gave up on it
  at::set_num_threads(1);              // no thread pool after fork
  std::string verdict = "a";
  try {
    read();
  } catch (const Error& e) {
    verdict = std::string("r") + e.what();
  } catch (const std::exception& e) {
    verdict = std::string("u") + e.what();
  }
  for (size_t done = 0; done < verdict.size();) {
    const ssize_t n = ::write(fd, verdict.data() + done, verdict.size() - done);
    if (n <= 0) break;
    done += size_t(n);
  }
  ::_exit(0);
}

}  // namespace

ChildResult run_in_child(const std::function<void()>& read, int timeout_ms) {
  int fds[2];
  if (::pipe(fds) != 0) throw Error(std::string("cannot read apart (pipe: ") + std::strerror(errno) + ")");
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("cannot read apart (fork: ") + std::strerror(errno) + ")");
  if (pid == 0) {
    ::close(fds[0]);
    child(read, fds[1]);
  }
  ::close(fds[1]);
  std::string text;
  bool hung = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      hung = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // the child is gone
    text.append(buf, size_t(n));
  }
  ::close(fds[0]);
  if (hung) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (hung) return {ChildOutcome::kHung, "ran past " + std::to_string(timeout_ms) + " ms"};
  if (WIFSIGNALED(status)) return {ChildOutcome::kCrashed, strsignal(WTERMSIG(status))};
  if (text.empty()) return {ChildOutcome::kCrashed, "stopped without a verdict"};
  const std::string message = text.substr(1);
  if (text[0] == 'a') return {ChildOutcome::kAccepted, ""};
  return {text[0] == 'r' ? ChildOutcome::kRefused : ChildOutcome::kUnclear, message};
}

void probe_in_child(const std::string& path, const std::function<void()>& read, int timeout_seconds) {
  const ChildResult r = run_in_child(read, timeout_seconds * 1000);
  const std::string first_line = r.message.substr(0, r.message.find('\n'));  // c10's carry a backtrace
  switch (r.outcome) {
    case ChildOutcome::kAccepted: return;
    case ChildOutcome::kRefused: throw Error(first_line);
    case ChildOutcome::kUnclear: throw Error(path + ": cannot read: " + first_line);
    case ChildOutcome::kCrashed: throw Error(path + ": malformed file: the reader crashed on it (" + r.message + ")");
    case ChildOutcome::kHung:
      throw Error(path + ": malformed file: reading it did not finish in " + std::to_string(timeout_seconds) + " s");
  }
}

}  // namespace gemma4::golden
