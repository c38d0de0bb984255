#pragma once
// The keys under which KV-shared layers find their K/V (GEMMA4.md, "Conventions that changed").
// transformers <= 5.5 keyed the store by the storing layer's index; >= 5.8 keys it by layer type.
// Both must meet at a rendezvous: every key a shared layer reads was written by an earlier layer.
#include <string>

#include "reference/config.h"

namespace gemma4 {

enum class KvKeyConvention { kLayerIndex, kLayerType };

const char* kv_key_convention_name(KvKeyConvention convention);  // "layer-index" / "layer-type"
KvKeyConvention parse_kv_key_convention(const std::string& name);  // throws gemma4::Error

// The key a storing layer writes (requires spec.stores_kv).
std::string kv_write_key(const Config& config, int layer, KvKeyConvention convention);
// The key a KV-shared layer reads (requires spec.kv_shared).
std::string kv_read_key(const Config& config, int layer, KvKeyConvention convention);
// Walks the layers in order and throws gemma4::Error naming the first shared layer whose key no
// earlier layer wrote.
void check_kv_rendezvous(const Config& config, KvKeyConvention convention);

}  // namespace gemma4
