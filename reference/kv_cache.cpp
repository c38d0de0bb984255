#include "reference/kv_cache.h"

#include <ATen/ATen.h>

#include "reference/error.h"
#include "reference/ops.h"

namespace gemma4 {
namespace {

using torch::Tensor;

struct ContiguousCache : LayerKvCache {
  CacheSpec spec;
  Tensor k, v;        // [B, Hkv, T, D], undefined before the first update
  int64_t first = 0;  // the token index of entry 0
};

std::unique_ptr<LayerKvCache> make_contiguous(const CacheSpec& spec) {
  auto cache = std::make_unique<ContiguousCache>();
  cache->spec = spec;
  return cache;
}

void update_contiguous(LayerKvCache& base, const Tensor& k, const Tensor& v, int64_t start) {
  auto& cache = dynamic_cast<ContiguousCache&>(base);
  const int64_t held = cache.k.defined() ? cache.k.size(2) : 0;
  if (cache.first + held != start) {
    throw Error("layer " + std::to_string(cache.spec.layer) + " cache: update at index " + std::to_string(start) +
                " but the cache ends at " + std::to_string(cache.first + held));
  }
  if (held == 0) {
    cache.k = k;
    cache.v = v;
    cache.first = start;
    return;
  }
  // The step's first query (index start) sees indices from start - window + 1: older ones go.
  int64_t drop = 0;
  if (cache.spec.window > 0) drop = std::max<int64_t>(0, start - cache.spec.window + 1 - cache.first);
  drop = std::min(drop, held);
  cache.k = at::cat({cache.k.slice(2, drop), k}, 2);
  cache.v = at::cat({cache.v.slice(2, drop), v}, 2);
  cache.first += drop;
}

CacheContents contiguous_contents(const LayerKvCache& base) {
  const auto& cache = dynamic_cast<const ContiguousCache&>(base);
  return {cache.k, cache.v, cache.first};
}

Tensor attend_contiguous(const Tensor& q, const LayerKvCache& base, const DecodeAttentionSpec& spec) {
  return attend_entries(q, contiguous_contents(base), spec);
}

}  // namespace

const KvCacheOps& reference_kv_cache_ops() {
  static const KvCacheOps ops{make_contiguous, update_contiguous, attend_contiguous, contiguous_contents};
  return ops;
}

Tensor attend_entries(const Tensor& q, const CacheContents& entries, const DecodeAttentionSpec& spec) {
  const Tensor mask = decode_attention_mask(spec, q.size(1), entries.first, entries.k.size(2), q.scalar_type(), q.device());
  return eager_attention(q, entries.k, entries.v, mask);
}

Tensor decode_attention_mask(const DecodeAttentionSpec& spec, int64_t queries, int64_t first, int64_t entries,
                             torch::ScalarType dtype, const torch::Device& device) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const AttentionSpec keys{spec.type, spec.sliding_window, /*bidirectional=*/false,
                           spec.padding.slice(1, first, first + entries)};
  return index_attention_mask(keys, at::arange(spec.start, spec.start + queries, i64),
                              at::arange(first, first + entries, i64), spec.padding.size(0), dtype);
}

}  // namespace gemma4
