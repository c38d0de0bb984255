#include "impl/plugin_loader.h"

#include <dlfcn.h>
#include <torch/version.h>

#include "impl/plugin_abi.h"
#include "reference/error.h"

namespace gemma4::impl {

Backend load_plugin(const std::string& path) {
  // RTLD_LOCAL: two plugins may define the same internal symbols.
  void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) throw Error(path + ": cannot load the backend plugin: " + ::dlerror());
  using Entry = const gemma4_plugin* (*)();
  const auto entry = reinterpret_cast<Entry>(::dlsym(library, "gemma4_plugin_entry"));
  if (!entry) throw Error(path + ": not a gemma4 backend plugin (no symbol gemma4_plugin_entry)");
  const gemma4_plugin* plugin = entry();
  if (!plugin) throw Error(path + ": gemma4_plugin_entry returned null");
  if (plugin->abi_version != GEMMA4_PLUGIN_ABI_VERSION) {
    throw Error(path + ": plugin ABI version " + std::to_string(plugin->abi_version) + ", this gemma4-conform needs " +
                std::to_string(GEMMA4_PLUGIN_ABI_VERSION) + " (rebuild the plugin against these headers)");
  }
  const std::string torch_version = plugin->torch_version ? plugin->torch_version : "";
  if (torch_version != TORCH_VERSION) {
    throw Error(path + ": plugin built against torch " + torch_version + ", this gemma4-conform uses torch " +
                TORCH_VERSION + " (rebuild the plugin against the same LibTorch)");
  }
  if (!plugin->create_backend) throw Error(path + ": plugin has no create_backend function");
  Backend backend = plugin->create_backend();
  if (backend.name.empty()) throw Error(path + ": the plugin's backend has no name");
  const LayerOps& ops = backend.ops;
  if (!ops.rms_norm || !ops.qk_norm_rope || !ops.attention || !ops.geglu || !ops.moe_experts || !ops.scaled_embedding ||
      !ops.route || !ops.scale_layer_output || !ops.logit_softcap || !ops.linear) {
    throw Error(path + ": backend '" + backend.name + "' leaves an op unset (start from gemma4::reference_layer_ops())");
  }
  return backend;
}

}  // namespace gemma4::impl
