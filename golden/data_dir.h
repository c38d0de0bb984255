#pragma once
// Where the project's committed data is read: golden/ (the goldens) and reference/configs/ (the
// released models' configs), laid out as in the source tree. A build tree reads its own source
// tree; an installed gemma4-conform reads <prefix>/share/gemma4_conformance; the Python package
// reads the data/ folder inside it. The entry point (the CLI's main, the Python module's import)
// chooses once, before anything runs; nothing is read from the environment.
#include <string>

namespace gemma4::golden {

std::string data_dir();
// Throws gemma4::Error when `dir` has no golden/ or no reference/configs/.
void set_data_dir(const std::string& dir);

// The installed data beside an executable or library at `binary_path`
// (<prefix>/bin/x -> <prefix>/share/gemma4_conformance), or "" when there is none.
std::string installed_data_dir(const std::string& binary_path);

}  // namespace gemma4::golden
