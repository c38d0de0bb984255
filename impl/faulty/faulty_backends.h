#pragma once
// Backends that each reproduce one real Gemma-4 bug (GEMMA4.md, "Known failure modes"), so that
// every check of the conformance suite is shown to fail when the thing it guards is broken.
#include <vector>

#include "impl/backend.h"

namespace gemma4::impl {

std::vector<Backend> faulty_backends();

}  // namespace gemma4::impl
