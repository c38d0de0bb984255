#pragma once
// Loads an out-of-tree backend from a shared library (impl/plugin_abi.h).
#include <string>

#include "impl/backend.h"

namespace gemma4::impl {

// Throws gemma4::Error naming the path and the problem: cannot open, no gemma4_plugin_entry,
// ABI or torch version mismatch, or an incomplete Backend (an op left unset, no name). The library
// stays loaded for the life of the process.
Backend load_plugin(const std::string& path);

}  // namespace gemma4::impl
