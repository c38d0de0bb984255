// The decoding bugs (issue "Decode conformance"; GEMMA4.md, "Decoding with a cache"): what
// inference engines got wrong in public when they ran Gemma-4 through a KV cache. Each wraps the
// reference's cache ops (reference_kv_cache_ops) or its q/k norm + RoPE and changes one thing.
// They touch only what decoding uses (the cache, per-row RoPE positions), so the full forward is
// unchanged and the bug shows in the decode category alone.
#include <ATen/ATen.h>

#include "impl/faulty/faulty_backends.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

// The entries of a cache with token indices >= `from`, as a cache of their own would hold them.
CacheContents entries_from(const CacheContents& all, int64_t from) {
  const int64_t skip = std::clamp<int64_t>(from - all.first, 0, all.k.size(2));
  return {all.k.slice(2, skip), all.v.slice(2, skip), all.first + skip};
}

// The reference's cache ops, except that on the layers `affected` picks the step's attention sees
// only the entries from token index `from(spec, c)` on (c: the step's queries).
using Affected = bool (*)(const DecodeAttentionSpec& spec);
using From = int64_t (*)(const DecodeAttentionSpec& spec, int64_t c);
template <Affected affected, From from>
KvCacheOps attending_from() {
  KvCacheOps ops = reference_kv_cache_ops();
  ops.attention = [](const Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
    if (!affected(spec)) return reference_kv_cache_ops().attention(q, cache, spec);
    return attend_entries(q, entries_from(reference_kv_cache_ops().contents(cache), from(spec, q.size(1))), spec);
  };
  return ops;
}

bool kv_shared_layer(const DecodeAttentionSpec& s) { return s.kv_shared; }
bool global_layer(const DecodeAttentionSpec& s) { return s.type == LayerType::kFull; }
int64_t this_step(const DecodeAttentionSpec& s, int64_t) { return s.start; }
int64_t last_window(const DecodeAttentionSpec& s, int64_t c) { return s.start + c - s.sliding_window; }

// The reference q/k norm + RoPE with every position moved by `shift(positions, q)` for the
// queries only; the keys keep theirs. Without per-row positions (the full forward) it is the
// reference op.
template <typename Shift>
auto shift_query_positions(Shift shift) {
  return [shift](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                 const RopeTable& rope, double eps) {
    const auto& reference = reference_layer_ops().qk_norm_rope;
    QkvOutputs out = reference(q, k, v, q_norm, k_norm, rope, eps);
    if (!rope.positions.defined()) return out;
    Tensor positions = shift(rope.positions, q, k);
    if (!positions.defined()) return out;
    // The run's RoPE table is as long as the run: a query shifted past it takes the last row.
    positions = positions.clamp(0, rope.cos.size(0) - 1);
    out.q = reference(q, Tensor(), Tensor(), q_norm, Tensor(), {rope.cos, rope.sin, positions}, eps).q;
    return out;
  };
}

Backend kv_shared_own_step() {
  // A KV-shared layer that keeps a cache of its own, fed only with the step it runs in, instead of
  // reading its source layer's: after the prompt it sees only the new token (a port measured per-
  // layer cosine 0.03 at layer 34 of E2B against transformers).
  Backend b = faulty_backend("faulty-decode-kv-shared-own-step",
                             "KV-shared layers attend only to this step's K/V, not to their source layer's whole cache "
                             "(inference ports of E2B/E4B; GEMMA4.md, Decoding with a cache)",
                             {Category::kDecode});
  b.kv_cache = attending_from<kv_shared_layer, this_step>();
  return b;
}

Backend query_rope_after_update() {
  // The query's RoPE offset read from the cache length after the step was appended to it: the
  // queries sit c positions too far (c = the step's tokens), the keys where they belong.
  Backend b = faulty_backend("faulty-decode-query-rope-after-update",
                             "the query's RoPE offset is read after the cache update: queries rotated c positions "
                             "too far, keys right (GEMMA4.md, Decoding with a cache)",
                             {Category::kDecode});
  b.ops.qk_norm_rope = shift_query_positions(
      [](const Tensor& positions, const Tensor& q, const Tensor&) { return positions + q.size(1); });
  return b;
}

Backend kv_shared_rope_offset() {
  // A KV-shared layer takes its RoPE offset from its own cache length, which stays 0 because it
  // never writes: its queries restart at position 0 every step, off by the tokens before the step
  // (the prompt and the earlier steps). Storing layers are right.
  Backend b = faulty_backend("faulty-decode-kv-shared-rope-offset",
                             "KV-shared layers read their RoPE offset from their own (empty) cache: query positions "
                             "restart at 0 each step, off by the prompt length (GEMMA4.md, Decoding with a cache)",
                             {Category::kDecode});
  b.ops.qk_norm_rope = shift_query_positions([](const Tensor& positions, const Tensor&, const Tensor& k) {
    if (k.defined()) return Tensor();  // a storing layer: unchanged
    return positions - positions.slice(1, 0, 1);
  });
  return b;
}

Backend sliding_cache_window_plus_one() {
  // The +1 family: the sliding cache and its mask built for sliding_window + 1 tokens, so a query
  // sees one key older than its window.
  Backend b = faulty_backend("faulty-decode-sliding-window-plus-one",
                             "the sliding layers' cache keeps, and the step's queries see, sliding_window + 1 keys "
                             "(the +1 family of window bugs in inference engines; GEMMA4.md, Layer types)",
                             {Category::kDecode});
  b.kv_cache = reference_kv_cache_ops();
  b.kv_cache.make = [](const CacheSpec& spec) {
    CacheSpec wider = spec;
    if (wider.window > 0) wider.window += 1;
    return reference_kv_cache_ops().make(wider);
  };
  b.kv_cache.attention = [](const Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
    DecodeAttentionSpec wider = spec;
    if (wider.type == LayerType::kSliding) wider.sliding_window += 1;
    return reference_kv_cache_ops().attention(q, cache, wider);
  };
  below_resolution_at_real_size(b);  // one key more among 512 or 1024: passes bf16 and f16 there
  return b;
}

Backend global_cache_trimmed() {
  // One cache shape for every layer, sized for the sliding layers: a global layer's cache keeps
  // only the last sliding_window keys, so it loses the start of any context longer than that.
  Backend b =
      faulty_backend("faulty-decode-global-cache-trimmed",
                     "global layers' caches are sized like the sliding layers' and keep only the last "
                     "sliding_window keys (caches split by the wrong geometry; GEMMA4.md, Decoding with a cache)",
                     {Category::kDecode});
  b.kv_cache = attending_from<global_layer, last_window>();
  // The real decode prompts are window + 40 long: the trimmed cache loses 40 of 560 or 1064 keys,
  // below bf16's resolution there (fails f32 and f16).
  below_resolution_at_real_size(b);
  return b;
}

}  // namespace

std::vector<Backend> faulty_decode_backends() {
  return {kv_shared_own_step(), query_rope_after_update(), kv_shared_rope_offset(), sliding_cache_window_plus_one(),
          global_cache_trimmed()};
}

}  // namespace gemma4::impl
