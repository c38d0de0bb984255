#pragma once
// Reading files that someone else wrote. The HDF5 C library (1.10) is not hardened against
// malformed files: a mutation loop (conformance/quality/fuzz) made it segfault and loop forever inside
// H5Gget_info and H5Dread. So a file from outside is first read once in a forked child; a crash or
// a hang there becomes a one-line gemma4::Error naming the file, and only a file the child read
// through is read again in this process.
#include <functional>
#include <string>

namespace gemma4::golden {

// How a read in a forked child ended.
enum class ChildOutcome {
  kAccepted,  // read through
  kRefused,   // threw gemma4::Error (message: its text, whole)
  kUnclear,   // threw another exception (message: its what())
  kCrashed,   // died of a signal (message: the signal's name)
  kHung,      // ran past the timeout and was killed
};

struct ChildResult {
  ChildOutcome outcome;
  std::string message;
};

// Runs `read` in a forked child (single-threaded, killed if this process dies) and reports how it
// ended; nothing the child does can take this process down. Used by probe_in_child and by the
// fuzz loop (conformance/quality/fuzz).
ChildResult run_in_child(const std::function<void()>& read, int timeout_ms);

// Runs `read` in a forked child and returns when it finished (accepted or refused: a refusal is
// rethrown here with the child's message). Throws gemma4::Error naming `path` when the child died
// of a signal or ran past `timeout_seconds`.
void probe_in_child(const std::string& path, const std::function<void()>& read, int timeout_seconds = 60);

}  // namespace gemma4::golden
