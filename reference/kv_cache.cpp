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
  // The step's first query (index start) sees indices from start - window + 1, and after a rollback
  // of up to max_rollback entries the next query sees from (end - max_rollback) - window + 1:
  // anything older goes.
  int64_t drop = 0;
  if (cache.spec.window > 0) {
    const int64_t seen = std::min(start, start + k.size(2) - cache.spec.max_rollback) - cache.spec.window + 1;
    drop = std::max<int64_t>(0, seen - cache.first);
  }
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

void rollback_contiguous(LayerKvCache& base, int64_t n) {
  auto& cache = dynamic_cast<ContiguousCache&>(base);
  const int64_t held = cache.k.defined() ? cache.k.size(2) : 0;
  check_rollback(cache.spec, n, held);
  cache.k = cache.k.slice(2, 0, held - n);
  cache.v = cache.v.slice(2, 0, held - n);
}

}  // namespace

const KvCacheOps& reference_kv_cache_ops() {
  static const KvCacheOps ops{make_contiguous, update_contiguous, attend_contiguous, contiguous_contents,
                              rollback_contiguous};
  return ops;
}

void check_rollback(const CacheSpec& spec, int64_t n, int64_t held) {
  if (n < 1 || n > spec.max_rollback || n > held) {
    throw Error("layer " + std::to_string(spec.layer) + " cache: rollback of " + std::to_string(n) +
                " entries, but 1 to " + std::to_string(std::min(spec.max_rollback, held)) +
                " may be dropped (max_rollback " + std::to_string(spec.max_rollback) + ", " + std::to_string(held) +
                " held)");
  }
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
