#pragma once
// Reading files that someone else wrote. The HDF5 C library (1.10) is not hardened against
// malformed files: a mutation loop (tools/fuzz) made it segfault and loop forever inside
// H5Gget_info and H5Dread. So a file from outside is first read once in a forked child; a crash or
// a hang there becomes a one-line gemma4::Error naming the file, and only a file the child read
// through is read again in this process.
#include <functional>
#include <string>

namespace gemma4::golden {

// Runs `read` in a forked child and returns when it finished (accepted or refused: a refusal is
// rethrown here with the child's message). Throws gemma4::Error naming `path` when the child died
// of a signal or ran past `timeout_seconds`.
void probe_in_child(const std::string& path, const std::function<void()>& read, int timeout_seconds = 60);

}  // namespace gemma4::golden
