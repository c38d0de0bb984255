// An out-of-tree backend in miniature, built as its own shared library and loaded with
// `gemma4-conform conform --backend-lib libgemma4_example_plugin.so`. It replaces one op, the
// GeGLU activation, with the tanh GELU written out from its formula (the reference calls ATen's
// gelu(approximate="tanh")), keeps the reference for everything else, and declares no f16.
// Built in-tree (impl/CMakeLists.txt) and out of tree against the installed package (CMakeLists.txt
// here); EXAMPLE_PLUGIN_PLANT_BUG, the suite's negative control, makes it the exact erf GELU.
#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>

#include "impl/plugin_abi.h"

namespace {

torch::Tensor written_out_geglu(const torch::Tensor& gate, const torch::Tensor& up) {
  const torch::Tensor x = gate.to(torch::kFloat32);
#ifndef EXAMPLE_PLUGIN_PLANT_BUG
  // gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated in fp32.
  const double c = std::sqrt(2.0 / M_PI);
  const torch::Tensor gelu = 0.5 * x * (1.0 + at::tanh(c * (x + 0.044715 * x * x * x)));
#else
  // The planted bug: the exact GELU, 0.5 x (1 + erf(x / sqrt(2))), off by up to about 5e-4.
  const torch::Tensor gelu = 0.5 * x * (1.0 + at::erf(x * M_SQRT1_2));
#endif
  return gelu.to(gate.scalar_type()) * up;
}

gemma4::impl::Backend create_backend() {
  gemma4::impl::Backend b;
#ifndef EXAMPLE_PLUGIN_PLANT_BUG
  b.name = "example-plugin";
#else
  b.name = "example-plugin-planted-bug";
#endif
  b.description = "example out-of-tree plugin: GeGLU with the tanh GELU written out, reference ops elsewhere";
  b.ops = gemma4::reference_layer_ops();
  b.ops.geglu = written_out_geglu;
  // Declared limits: the suite reports f16 runs as not_supported rather than failed.
  b.capabilities.dtypes = {torch::kFloat32, torch::kBFloat16};
  return b;
}

const gemma4_plugin kPlugin{GEMMA4_PLUGIN_ABI_VERSION, TORCH_VERSION, create_backend};

}  // namespace

extern "C" const gemma4_plugin* gemma4_plugin_entry() { return &kPlugin; }
