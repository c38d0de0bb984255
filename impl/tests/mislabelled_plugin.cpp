// Plugins that lie about their kind, the negative controls of `gemma4-conform calibrate`
// (tools/tests/test_calibrate_cli.cpp): built twice, as
//   MISLABELLED_VARIANT: declares itself a legitimate variant but widens the sliding window by one;
//   otherwise:           declares itself faulty (its bug showing in golden) but is the reference.
// calibrate must report each run as not what was expected and exit 1.
#include <torch/version.h>

#include "impl/plugin_abi.h"

namespace {

gemma4::impl::Backend create_backend() {
  gemma4::impl::Backend b;
  b.ops = gemma4::reference_layer_ops();
#ifdef MISLABELLED_VARIANT
  b.name = "mislabelled-variant";
  b.description = "claims to be a legitimate variant; its sliding window is one key too wide";
  b.kind = gemma4::impl::BackendKind::kVariant;
  b.ops.attention = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const gemma4::AttentionSpec& spec) {
    gemma4::AttentionSpec wider = spec;
    wider.sliding_window += 1;
    return gemma4::reference_layer_ops().attention(q, k, v, wider);
  };
#else
  b.name = "mislabelled-faulty";
  b.description = "claims a bug that shows in the golden category; it is the reference";
  b.kind = gemma4::impl::BackendKind::kFaulty;
  b.fails_in = {gemma4::impl::Category::kGolden};
#endif
  return b;
}

const gemma4_plugin kPlugin{GEMMA4_PLUGIN_ABI_VERSION, TORCH_VERSION, create_backend};

}  // namespace

extern "C" const gemma4_plugin* gemma4_plugin_entry() { return &kPlugin; }
