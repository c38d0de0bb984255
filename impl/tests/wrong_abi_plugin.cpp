// A plugin built for another ABI version: the loader must refuse it with a message naming both
// versions (tools/tests/test_conform_cli.cpp).
#include <torch/version.h>

#include "impl/plugin_abi.h"

namespace {
gemma4::impl::Backend create_backend() { return {}; }
const gemma4_plugin kPlugin{GEMMA4_PLUGIN_ABI_VERSION + 1, TORCH_VERSION, create_backend};
}  // namespace

extern "C" const gemma4_plugin* gemma4_plugin_entry() { return &kPlugin; }
