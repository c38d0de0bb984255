// The KV-cache bugs that show once a sliding cache wraps or a draft is taken back (issue
// "Real-size conformance"): what inference engines got wrong in public when a context grew past
// the window. Each starts from the reference's cache ops and changes one thing. They touch only
// decoding, so the full forward is unchanged and the bug shows in the decode category alone; with
// the tiny models' window of 4 (and the transformers decode goldens' 8) every one of them is
// reached within the suite's few tokens, and at the released windows past 512 or 1024 tokens.
#include <ATen/ATen.h>

#include <limits>

#include "impl/faulty/faulty_backends.h"
#include "reference/error.h"
#include "reference/ops.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

const KvCacheOps& reference_ops() { return reference_kv_cache_ops(); }

// Eager attention of the step's queries against `entries` under a boolean mask [B, 1, c, T]
// (true: seen), with -infinity where a key is hidden, as a hand-written kernel does: a row that
// sees no key is 0/0 = NaN (transformers adds the dtype's lowest value instead and stays finite).
Tensor attend_with_minus_infinity(const Tensor& q, const CacheContents& entries, const Tensor& seen) {
  const int64_t B = q.size(0), c = q.size(1), Hq = q.size(2), D = q.size(3), group = Hq / entries.k.size(1);
  const Tensor k = entries.k.repeat_interleave(group, 1).to(torch::kFloat32);
  const Tensor v = entries.v.repeat_interleave(group, 1).to(torch::kFloat32);
  const Tensor scores = at::matmul(q.transpose(1, 2).to(torch::kFloat32), k.transpose(2, 3))
                            .masked_fill(~seen, -std::numeric_limits<float>::infinity());
  const Tensor out = at::matmul(at::softmax(scores, -1), v);
  return out.to(q.scalar_type()).transpose(1, 2).reshape({B, c, Hq * D});
}

Tensor seen_keys(const DecodeAttentionSpec& spec, int64_t queries, int64_t first, int64_t entries, const Tensor& q) {
  return decode_attention_mask(spec, queries, first, entries, torch::kFloat32, q.device()) == 0;
}

Backend ring_physical_slot() {
  // quic/efficient-transformers #1235 (the 26B-A4B sliding cache): a ring of window + 15 slots
  // (the window and a step of up to 16 queries) whose mask computes each key's index from its
  // physical slot (index mod slots) instead of the token index it holds. Right until the ring
  // wraps; after that the keys of the window look older than the window, the mask hides them, and
  // the model repeats itself.
  Backend b = faulty_backend("faulty-decode-ring-physical-slot",
                             "a sliding layer's ring cache masks its keys by physical slot instead of token index: "
                             "wrong once the ring wraps (quic/efficient-transformers #1235)",
                             {Category::kDecode});
  b.kv_cache = reference_ops();
  b.kv_cache.attention = [](const Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
    if (spec.type != LayerType::kSliding) return reference_ops().attention(q, cache, spec);
    const CacheContents held = reference_ops().contents(cache);
    const int64_t T = held.k.size(2), slots = spec.sliding_window + 15;
    const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
    const AttentionSpec keys{spec.type, spec.sliding_window, false, spec.padding.slice(1, held.first, held.first + T)};
    const Tensor physical = at::arange(held.first, held.first + T, i64).remainder(slots);
    const Tensor mask = index_attention_mask(keys, at::arange(spec.start, spec.start + q.size(1), i64), physical,
                                             spec.padding.size(0), q.scalar_type());
    return eager_attention(q, held.k, held.v, mask);
  };
  return b;
}

Backend prefill_window_cut() {
  // lablup/mlxcel #401: a sliding layer's prefill longer than the window cut the key axis down to
  // the last `window` keys and masked with -infinity; the earliest queries then saw no key and
  // their softmax was NaN (the model emitted <pad>). Left-padded rows' padding queries see no key
  // either, so they are NaN in any step. NaN spreads to real rows through 0 x NaN in P.V.
  Backend b = faulty_backend("faulty-decode-prefill-window-cut",
                             "a sliding prefill longer than the window keeps only the last window keys and masks "
                             "with -inf: queries that see no key become NaN (lablup/mlxcel #401)",
                             {Category::kDecode});
  b.kv_cache = reference_ops();
  b.kv_cache.attention = [](const Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
    CacheContents held = reference_ops().contents(cache);
    if (spec.type == LayerType::kSliding) {
      const int64_t cut = std::clamp<int64_t>(spec.start + q.size(1) - spec.sliding_window - held.first, 0,
                                              held.k.size(2));
      held = {held.k.slice(2, cut), held.v.slice(2, cut), held.first + cut};
    }
    return attend_with_minus_infinity(q, held, seen_keys(spec, q.size(1), held.first, held.k.size(2), q));
  };
  return b;
}

// A sliding cache as transformers keeps it (window - 1 entries before the step, no spare for a
// rollback), whose rollback does nothing once it has dropped an entry.
struct RotatingCache : LayerKvCache {
  CacheSpec spec;
  Tensor k, v;
  int64_t first = 0;
};

Backend rollback_after_wrap() {
  // ml-explore/mlx-swift-lm #383 ("Bug D"; #424, fixed by #516): the rotating cache is trimmable
  // only while offset < maxCacheSize, so once a sliding cache has wrapped the speculative rewind
  // silently does nothing: the rejected draft's K/V stay in the cache as the newest context and
  // the accepted tokens are appended after them. Global caches roll back correctly.
  Backend b = faulty_backend("faulty-decode-rollback-after-wrap",
                             "a wrapped sliding cache ignores the speculative rollback: rejected draft tokens stay in "
                             "context (ml-explore/mlx-swift-lm #383, #424)",
                             {Category::kDecode});
  b.kv_cache.make = [](const CacheSpec& spec) -> std::unique_ptr<LayerKvCache> {
    auto c = std::make_unique<RotatingCache>();
    c->spec = spec;
    return c;
  };
  b.kv_cache.update = [](LayerKvCache& base, const Tensor& k, const Tensor& v, int64_t start) {
    auto& c = dynamic_cast<RotatingCache&>(base);
    const int64_t held = c.k.defined() ? c.k.size(2) : 0;
    if (held == 0) {
      c.k = k, c.v = v, c.first = start;
      return;
    }
    c.first = start - held;  // after an ignored rollback the stale entries count as the newest context
    const int64_t drop =
        c.spec.window > 0 ? std::clamp<int64_t>(start - c.spec.window + 1 - c.first, 0, held) : 0;
    c.k = at::cat({c.k.slice(2, drop), k}, 2);
    c.v = at::cat({c.v.slice(2, drop), v}, 2);
    c.first += drop;
  };
  b.kv_cache.attention = [](const Tensor& q, const LayerKvCache& base, const DecodeAttentionSpec& spec) {
    const auto& c = dynamic_cast<const RotatingCache&>(base);
    return attend_entries(q, {c.k, c.v, c.first}, spec);
  };
  b.kv_cache.contents = [](const LayerKvCache& base) {
    const auto& c = dynamic_cast<const RotatingCache&>(base);
    return CacheContents{c.k, c.v, c.first};
  };
  b.kv_cache.rollback = [](LayerKvCache& base, int64_t n) {
    auto& c = dynamic_cast<RotatingCache&>(base);
    check_rollback(c.spec, n, c.k.defined() ? c.k.size(2) : 0);
    if (c.spec.window > 0 && c.first > 0) return;  // wrapped: "not trimmable"
    c.k = c.k.slice(2, 0, c.k.size(2) - n);
    c.v = c.v.slice(2, 0, c.v.size(2) - n);
  };
  // A draft of at most 4 tokens left among 500 or 1000 keys: below bf16's resolution at real size
  // (fails f32 and f16 there); the tiny speculative checks hold it in every dtype.
  below_resolution_at_real_size(b);
  return b;
}

Backend kv_shared_overwrites_source() {
  // vllm-project/vllm-ascend #11791: the Ascend attention wrote every layer's K/V into the cache
  // (reshape_and_cache), so a KV-shared layer overwrote its source layer's slots for the step with
  // its own projections. Our KV-shared layers have no k_proj (transformers 5.17 builds none); the
  // stand-in for their own K/V is their query's first Hkv heads, after norm and RoPE like a key.
  // The write lands in the storage the reference cache hands out (contents() returns its tensors).
  Backend b = faulty_backend("faulty-decode-kv-shared-overwrites-source",
                             "KV-shared layers write their own K/V over their source layer's cache entries for the step "
                             "(vllm-project/vllm-ascend #11791)",
                             {Category::kDecode});
  b.kv_cache = reference_ops();
  b.kv_cache.attention = [](const Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
    if (spec.kv_shared) {
      const CacheContents held = reference_ops().contents(cache);
      const int64_t c = q.size(1), Hkv = held.k.size(1);
      const Tensor own = q.slice(2, 0, Hkv).transpose(1, 2);  // [B, Hkv, c, D]
      held.k.narrow(2, spec.start - held.first, c).copy_(own);
      held.v.narrow(2, spec.start - held.first, c).copy_(own);
    }
    return reference_ops().attention(q, cache, spec);
  };
  return b;
}

Backend decode_ignores_window() {
  // EricLBuehler/mistral.rs #2094: the paged decode kernel was given no window for the sliding
  // layers (35 of 42 on E4B), so single-token steps attended over the whole context; the prefill
  // path was right. Wrong from the first step whose context is longer than the window.
  Backend b = faulty_backend("faulty-decode-ignores-window",
                             "one-token decode steps on sliding layers attend to the whole context; the prefill keeps "
                             "the window (EricLBuehler/mistral.rs #2094)",
                             {Category::kDecode});
  b.kv_cache = reference_ops();
  b.kv_cache.make = [](const CacheSpec& spec) {
    CacheSpec everything = spec;
    everything.window = 0;  // the cache keeps every key, as the paged cache did
    return reference_ops().make(everything);
  };
  b.kv_cache.attention = [](const Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
    DecodeAttentionSpec s = spec;
    if (q.size(1) == 1) s.type = LayerType::kFull;
    return reference_ops().attention(q, cache, s);
  };
  return b;
}

Backend sink_lost_after_wrap() {
  // A rotating cache's eviction applied to every layer type: a ring of sliding_window slots (the
  // circular layout of vllm-project/vllm #1304's Mistral cache) overwrites its oldest slot once
  // index sliding_window is written, and an engine that evicts through one shared routine drops
  // the oldest entry of the global layers too. From then on a global layer no longer sees its
  // row's first real key (the attention sink: the first key that is not padding); the rest of its
  // cache, and every sliding layer, are right. A bug class, with no single public report. Each
  // query from index sliding_window on, later than its row's first real key, loses it. With random
  // weights the first key carries little attention, yet the tiny decode goldens see it in every
  // dtype (measured on the CPU: worst ratio 1.246e+04 in f32, 3.841 in bf16 at
  // decode/equivalence/31b); at real size trained-like sinks carry far more.
  Backend b = faulty_backend("faulty-decode-sink-lost-after-wrap",
                             "once the sliding ring wraps, global layers lose their first real key (the attention "
                             "sink): a rotating cache's eviction of the oldest entry applied to every layer type "
                             "(a bug class; the overwritten slot 0 is vllm-project/vllm #1304's Mistral ring)",
                             {Category::kDecode});
  b.kv_cache = reference_ops();
  b.kv_cache.attention = [](const Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
    if (spec.type != LayerType::kFull) return reference_ops().attention(q, cache, spec);
    const CacheContents held = reference_ops().contents(cache);
    const int64_t B = q.size(0), c = q.size(1), T = held.k.size(2);
    const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
    const Tensor sink = spec.padding.to(q.device()).ne(0).to(torch::kInt64).argmax(1).view({B, 1, 1});  // first 1
    const Tensor query = at::arange(spec.start, spec.start + c, i64).view({1, c, 1});
    const Tensor key = at::arange(held.first, held.first + T, i64).view({1, 1, T});
    const Tensor lost = key.eq(sink) & query.ge(spec.sliding_window) & query.gt(sink);  // [B, c, T]
    const Tensor mask = decode_attention_mask(spec, c, held.first, T, q.scalar_type(), q.device())
                            .masked_fill(lost.unsqueeze(1), lowest_value(q.scalar_type()));
    return eager_attention(q, held.k, held.v, mask);
  };
  return b;
}

}  // namespace

std::vector<Backend> faulty_cache_backends() {
  return {ring_physical_slot(), prefill_window_cut(), rollback_after_wrap(), kv_shared_overwrites_source(),
          decode_ignores_window(), sink_lost_after_wrap()};
}

}  // namespace gemma4::impl
