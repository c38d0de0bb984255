// What the faulty backends' unit tests share.
#pragma once

#include <string>

#include "impl/backend.h"

namespace gemma4::impl {

// A faulty backend by name (find_backend: throws naming it when there is none).
inline const Backend& faulty(const std::string& name) { return find_backend(name); }

}  // namespace gemma4::impl
