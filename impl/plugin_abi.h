#pragma once
// The plugin ABI: how an out-of-tree backend, built as a shared library against the same LibTorch
// and these headers, hands its Backend to gemma4-conform (--backend-lib PATH).
//
// A plugin defines one C symbol:
//
//   extern "C" const gemma4_plugin* gemma4_plugin_entry(void);
//
// returning a pointer to a static gemma4_plugin filled with GEMMA4_PLUGIN_ABI_VERSION, the
// TORCH_VERSION it was compiled against, and a function that creates its Backend. The loader
// refuses a plugin whose ABI version or torch version differs from its own, with a message that
// names both: Backend holds C++ std::function and at::Tensor, which only match within one ABI.
#include "impl/backend.h"

// 2: Backend gained kind, fails_in, below_reduced_precision; 3: kv_cache; 4: KvCacheOps::rollback and
// CacheSpec::max_rollback (speculative decoding); 6: LayerOps::linear; 7: KvCacheOps::quantization and
// CacheSpec::widest_head_dim (fp8 KV caches)
#define GEMMA4_PLUGIN_ABI_VERSION 7

extern "C" {
struct gemma4_plugin {
  int abi_version;                           // GEMMA4_PLUGIN_ABI_VERSION
  const char* torch_version;                 // TORCH_VERSION (torch/version.h)
  gemma4::impl::Backend (*create_backend)();  // called once, after the version checks
};
}
