// A plugin that misbehaves the way a kernel under development does, the negative control of
// `conform --isolate` (tools/tests/test_conform_cli.cpp): the reference, except that its GeGLU
// ends the process with SIGSEGV when GEMMA4_MISBEHAVE=crash, or never returns when
// GEMMA4_MISBEHAVE=hang. Unset, it is the reference. In one process such a backend ends the
// command; isolated, it must become one failing run while the others still run.
#include <torch/version.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "impl/plugin_abi.h"

namespace {

gemma4::impl::Backend create_backend() {
  gemma4::impl::Backend b;
  b.ops = gemma4::reference_layer_ops();
  b.name = "misbehaving-plugin";
  b.description = "the reference; GEMMA4_MISBEHAVE=crash|hang makes its GeGLU crash or hang";
  b.kind = gemma4::impl::BackendKind::kVariant;
  b.ops.geglu = [](const torch::Tensor& gate, const torch::Tensor& up) {
    const char* how = std::getenv("GEMMA4_MISBEHAVE");
    const std::string mode = how ? how : "";
    if (mode == "crash") std::raise(SIGSEGV);
    while (mode == "hang") std::this_thread::sleep_for(std::chrono::seconds(1));
    return gemma4::reference_layer_ops().geglu(gate, up);
  };
  return b;
}

const gemma4_plugin kPlugin{GEMMA4_PLUGIN_ABI_VERSION, TORCH_VERSION, create_backend};

}  // namespace

extern "C" const gemma4_plugin* gemma4_plugin_entry() { return &kPlugin; }
