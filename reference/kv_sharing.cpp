#include "reference/kv_sharing.h"

#include <set>

#include "reference/error.h"

namespace gemma4 {

const char* kv_key_convention_name(KvKeyConvention convention) {
  return convention == KvKeyConvention::kLayerIndex ? "layer-index" : "layer-type";
}

KvKeyConvention parse_kv_key_convention(const std::string& name) {
  if (name == "layer-index") return KvKeyConvention::kLayerIndex;
  if (name == "layer-type") return KvKeyConvention::kLayerType;
  throw Error("unknown KV key convention '" + name + "' (expected layer-index or layer-type)");
}

std::string kv_write_key(const Config& config, int layer, KvKeyConvention convention) {
  if (convention == KvKeyConvention::kLayerIndex) return std::to_string(layer);
  return layer_type_name(config.layer_types.at(layer));
}

std::string kv_read_key(const Config& config, int layer, KvKeyConvention convention) {
  if (convention == KvKeyConvention::kLayerIndex) return std::to_string(config.layers.at(layer).kv_source);
  return layer_type_name(config.layer_types.at(layer));
}

void check_kv_rendezvous(const Config& config, KvKeyConvention convention) {
  std::set<std::string> written;
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    const LayerSpec& spec = config.layers[l];
    if (spec.kv_shared) {
      const std::string key = kv_read_key(config, l, convention);
      if (!written.count(key)) {
        throw Error("layer " + std::to_string(l) + " reads shared K/V under key '" + key + "' (" +
                    kv_key_convention_name(convention) + " convention) but no earlier layer stored it");
      }
    }
    if (spec.stores_kv) written.insert(kv_write_key(config, l, convention));
  }
}

}  // namespace gemma4
