#include "reference/kv_quantization.h"

#include <ATen/ATen.h>

#include <limits>
#include <memory>

#include "reference/error.h"

namespace gemma4 {

using torch::Tensor;

const char* kv_quantization_name(KvQuantization q) {
  switch (q) {
    case KvQuantization::kNone: return "none";
    case KvQuantization::kFp8PerTensor: return "fp8-e4m3-per-tensor";
    case KvQuantization::kFp8PerHead: return "fp8-e4m3-per-head";
    case KvQuantization::kFp8PerToken: return "fp8-e4m3-per-token";
  }
  return "?";
}

KvQuantization kv_quantization_from_name(const std::string& name) {
  std::string known;
  for (KvQuantization q : {KvQuantization::kNone, KvQuantization::kFp8PerTensor, KvQuantization::kFp8PerHead,
                           KvQuantization::kFp8PerToken}) {
    if (name == kv_quantization_name(q)) return q;
    known += std::string(known.empty() ? "" : ", ") + kv_quantization_name(q);
  }
  throw Error("KV cache quantization '" + name + "' is not one of " + known);
}

Tensor fp8_scales(const Tensor& x, KvQuantization q) {
  const Tensor a = x.to(torch::kFloat32).abs();
  Tensor amax;
  switch (q) {
    case KvQuantization::kFp8PerTensor: amax = a.amax().view({1, 1, 1, 1}); break;
    case KvQuantization::kFp8PerHead: amax = a.amax({0, 2, 3}, /*keepdim=*/true); break;
    case KvQuantization::kFp8PerToken: amax = a.amax(-1, /*keepdim=*/true); break;
    case KvQuantization::kNone: throw Error("fp8_scales: the cache is not quantized (KvQuantization::kNone)");
  }
  return amax.clamp_min(std::numeric_limits<float>::min()) / kE4m3Max;
}

Tensor fp8_encode(const Tensor& x, const Tensor& scale) {
  return (x.to(torch::kFloat32) / scale).clamp(-kE4m3Max, kE4m3Max).to(at::kFloat8_e4m3fn);
}

Tensor fp8_decode(const Tensor& codes, const Tensor& scale, torch::ScalarType dtype) {
  return (codes.to(torch::kFloat32) * scale).to(dtype);
}

namespace {

struct QuantizedOnWrite : LayerKvCache {
  std::unique_ptr<LayerKvCache> inner;
  Tensor k_scale, v_scale;  // static kinds: fixed at the first update
};

}  // namespace

KvCacheOps quantize_on_write(const KvCacheOps& inner, KvQuantization q) {
  if (q == KvQuantization::kNone) throw Error("quantize_on_write: KvQuantization::kNone quantizes nothing");
  const bool dynamic = q == KvQuantization::kFp8PerToken;
  KvCacheOps ops;
  ops.quantization = q;
  ops.make = [inner](const CacheSpec& spec) {
    auto cache = std::make_unique<QuantizedOnWrite>();
    cache->inner = inner.make(spec);
    return std::unique_ptr<LayerKvCache>(std::move(cache));
  };
  ops.update = [inner, q, dynamic](LayerKvCache& base, const Tensor& k, const Tensor& v, int64_t start) {
    auto& c = dynamic_cast<QuantizedOnWrite&>(base);
    if (dynamic || !c.k_scale.defined()) c.k_scale = fp8_scales(k, q), c.v_scale = fp8_scales(v, q);
    inner.update(*c.inner, fp8_decode(fp8_encode(k, c.k_scale), c.k_scale, k.scalar_type()),
                 fp8_decode(fp8_encode(v, c.v_scale), c.v_scale, v.scalar_type()), start);
  };
  ops.attention = [inner](const Tensor& q_, const LayerKvCache& base, const DecodeAttentionSpec& spec) {
    return inner.attention(q_, *dynamic_cast<const QuantizedOnWrite&>(base).inner, spec);
  };
  ops.contents = [inner](const LayerKvCache& base) {
    return inner.contents(*dynamic_cast<const QuantizedOnWrite&>(base).inner);
  };
  if (inner.rollback) {
    ops.rollback = [inner](LayerKvCache& base, int64_t n) {
      inner.rollback(*dynamic_cast<QuantizedOnWrite&>(base).inner, n);
    };
  }
  return ops;
}

}  // namespace gemma4
