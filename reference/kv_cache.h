#pragma once
// The K/V cache of incremental decoding (GEMMA4.md, "Decoding with a cache"): what an inference
// engine keeps between steps, and the two ops an inference kernel replaces on it, the cache
// update and the attention of new queries against the cache. A backend chooses the layout
// (contiguous, paged, ...) behind KvCacheOps; the reference keeps contiguous tensors.
//
// Indices, not positions: entry j of a cache is the key of token index j of the batch (padding
// included), counted from the first prompt token. RoPE positions are separate (per row, from the
// attention mask, as transformers' generate computes them) and already applied to k.
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>

#include "reference/config.h"

namespace gemma4 {

// What a storing layer's cache must hold.
struct CacheSpec {
  int layer = 0;
  LayerType type = LayerType::kSliding;
  int64_t batch = 0, kv_heads = 0, head_dim = 0;
  int64_t window = 0;    // sliding layers: a query sees the window's last `window` indices; 0: every index
  int64_t capacity = 0;  // the most token indices the run will reach (prompt + new tokens)
  torch::ScalarType dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  // Speculative decoding: the most entries one rollback may drop (the longest draft). A sliding
  // cache keeps that many more entries, since a rollback brings back queries that see older keys.
  int64_t max_rollback = 0;
  // The widest head dim among the model's layers (Gemma-4: the global layers' 512 beside the sliding
  // layers' 256), by which an engine sizes workspaces every layer shares; 0: head_dim.
  int64_t widest_head_dim = 0;
};

// What a cache stores K and V as. kNone: the step's dtype, unchanged. The fp8 kinds store float8
// e4m3 codes (largest finite value 448) with fp32 scales, scale = amax / 448 over:
//  - kFp8PerTensor: the layer's K (and apart, its V) of its first update, then fixed (the static
//    k_scale / v_scale of vLLM and TensorRT-LLM, calibrated on the prompt); later entries saturate;
//  - kFp8PerHead: the same per KV head;
//  - kFp8PerToken: each entry's own head vector, at its write (dynamic; nothing saturates).
// A quantized cache is judged against the reference decoding through a cache that encodes and
// decodes every entry the same way (reference/kv_quantization.h), not against a float cache.
enum class KvQuantization { kNone, kFp8PerTensor, kFp8PerHead, kFp8PerToken };
const char* kv_quantization_name(KvQuantization q);  // "none", "fp8-e4m3-per-tensor", ...
KvQuantization kv_quantization_from_name(const std::string& name);  // throws naming the known ones

// The mask of one step's queries against a cache.
struct DecodeAttentionSpec {
  LayerType type = LayerType::kSliding;
  int64_t sliding_window = 0;  // as in config.json: query i sees keys i - window + 1 .. i
  int64_t start = 0;           // the index of this step's first query (= tokens before this step)
  torch::Tensor padding;       // [B, start + c] int64 over every index so far: 1 token, 0 padding
  bool kv_shared = false;      // the layer reads its source layer's cache (it wrote nothing)
};

// A backend's cache of one storing layer. Only that backend's KvCacheOps know what is inside.
class LayerKvCache {
 public:
  virtual ~LayerKvCache() = default;
};

struct CacheContents {
  torch::Tensor k, v;  // [B, Hkv, T, D]: the entries the cache holds, oldest first
  int64_t first = 0;   // the token index of entry 0
};

struct KvCacheOps {
  std::function<std::unique_ptr<LayerKvCache>(const CacheSpec& spec)> make;
  // This step's k and v [B, Hkv, c, D] (after norm and RoPE) at indices start .. start + c - 1.
  // After it, the cache must hold at least every key a query of this step may see; a sliding
  // cache may drop older ones.
  std::function<void(LayerKvCache& cache, const torch::Tensor& k, const torch::Tensor& v, int64_t start)> update;
  // The step's queries q [B, c, Hq, D] against the (updated) cache, softmax with scale 1 in fp32:
  // [B, c, Hq * D], as LayerOps::attention.
  std::function<torch::Tensor(const torch::Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec)>
      attention;
  // What the cache holds, for goldens and checks.
  std::function<CacheContents(const LayerKvCache& cache)> contents;
  // Speculative decoding: forget the newest n entries (a rejected draft), 1 <= n <= the spec's
  // max_rollback; the next update starts n indices earlier and must see what it would have seen
  // had the draft never been fed, also after a ring has wrapped. Optional: unset, the backend
  // cannot decode speculatively (the suite reports "not supported").
  std::function<void(LayerKvCache& cache, int64_t n)> rollback;
  // What the cache stores (above): the decode checks take their truth from it.
  KvQuantization quantization = KvQuantization::kNone;
};

// Contiguous tensors; a sliding cache keeps, after each update, the last window - 1 entries before
// the step plus the step's (what the step's queries can see), as transformers' sliding layer does,
// and max_rollback entries more.
const KvCacheOps& reference_kv_cache_ops();

// Throws gemma4::Error naming the layer unless 1 <= n <= spec.max_rollback and n <= held (the
// entries the cache holds): what every rollback op checks first.
void check_rollback(const CacheSpec& spec, int64_t n, int64_t held);

// The step's queries q [B, c, Hq, D] against `entries` (any run of consecutive cache entries) under
// the step's mask, with the reference's eager attention: what the reference cache computes.
torch::Tensor attend_entries(const torch::Tensor& q, const CacheContents& entries, const DecodeAttentionSpec& spec);

// The additive mask [B, 1, c, T] of a step's queries (indices spec.start ..) against cache entries
// with indices first .. first + T - 1, in `dtype` (0 allowed, the dtype's lowest value not).
torch::Tensor decode_attention_mask(const DecodeAttentionSpec& spec, int64_t queries, int64_t first, int64_t entries,
                                    torch::ScalarType dtype, const torch::Device& device);

}  // namespace gemma4
