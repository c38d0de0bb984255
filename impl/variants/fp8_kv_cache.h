#pragma once
// A legitimate quantized KV cache (fp8_kv_cache.cpp): float8 e4m3 codes with fp32 scales
// (KvQuantization, reference/kv_cache.h), every layer in a ring of slots, attention on the codes
// decoded to fp32. The hooks are the places the faulty fp8 caches (impl/faulty/faulty_fp8_kv_cache.cpp)
// change, one each; left unset they do what a correct cache does.
#include <functional>

#include "reference/kv_cache.h"

namespace gemma4::impl {

struct Fp8KvCacheHooks {
  // The values a static scale (per tensor, per head) is calibrated on, from the layer's first
  // step of k or v [B, Hkv, c, D]. Unset: those values themselves.
  std::function<torch::Tensor(const torch::Tensor& x, const CacheSpec& spec)> calibration_values;
  // Per-token scales: the ring slots whose scales decode the held entries, given the slots that
  // hold their codes ([n] int64, oldest entry first). Unset: the same slots.
  std::function<torch::Tensor(const torch::Tensor& code_slots)> scale_slots;
  // Full (global) layers: V decoded from the K codes and scales.
  bool full_layers_read_k_as_v = false;
};

KvCacheOps fp8_kv_cache_ops(KvQuantization quantization, Fp8KvCacheHooks hooks = {});

}  // namespace gemma4::impl
