// A legitimate quantized KV cache, an inference engine's fp8 KV cache in miniature:
//  - K and V are stored as float8 e4m3 codes (bytes) beside fp32 scales: per tensor or per head
//    (static: calibrated on the layer's first update, then fixed; later entries saturate at 448),
//    or per token and head (dynamic: each entry's own, kept in the ring beside its codes);
//  - every layer keeps a ring of slots, token index t in slot t % slots. A full layer's ring holds
//    the whole run; a sliding layer's holds what the step's queries may see (window - 1 keys before
//    the step, the step, max_rollback more), resized when a step needs another size: so after a
//    prefill chunk a ring of window + max_rollback slots wraps with every window of steps;
//  - attention decodes the codes to fp32 and computes in fp32, rounding once (as a kernel that
//    converts e4m3 to fp32 in registers), where the reference's rounds scores and probabilities.
// It is judged against the reference decoding through quantize_on_write (reference/kv_quantization.h):
// the same codes up to the one e4m3 step that rounding its inputs differently may flip.
#include "impl/variants/fp8_kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "reference/error.h"
#include "reference/kv_quantization.h"
#include "reference/ops.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

struct Fp8Cache : LayerKvCache {
  CacheSpec spec;
  int64_t slots = 0;
  Tensor k_codes, v_codes;  // [B, Hkv, slots, D] uint8: e4m3 bit patterns
  Tensor k_scale, v_scale;  // static [1, 1, 1, 1] / [1, Hkv, 1, 1]; per token [B, Hkv, slots, 1]
  int64_t end = 0;          // token indices written: entries end - held .. end - 1 are held
  int64_t held = 0;
};

bool per_token(KvQuantization q) { return q == KvQuantization::kFp8PerToken; }

// The ring slots of token indices first .. first + n - 1.
Tensor slot_index(int64_t first, int64_t n, int64_t slots, const torch::Device& device) {
  return at::arange(first, first + n, torch::TensorOptions().dtype(torch::kInt64).device(device)).remainder(slots);
}

std::string where(const Fp8Cache& c) { return "layer " + std::to_string(c.spec.layer) + " fp8 cache: "; }

// A new ring of `slots` slots holding the entries from token index `first` on.
void resize(Fp8Cache& c, int64_t slots, int64_t first, KvQuantization q) {
  const int64_t n = c.end - first;
  const auto bytes = torch::TensorOptions().dtype(torch::kUInt8).device(c.spec.device);
  const Tensor k = at::zeros({c.spec.batch, c.spec.kv_heads, slots, c.spec.head_dim}, bytes), v = k.clone();
  Tensor ks, vs;
  if (per_token(q)) ks = at::zeros({c.spec.batch, c.spec.kv_heads, slots, 1}, bytes.dtype(torch::kFloat32)), vs = ks.clone();
  if (n > 0) {
    const Tensor from = slot_index(first, n, c.slots, c.spec.device), to = slot_index(first, n, slots, c.spec.device);
    k.index_copy_(2, to, c.k_codes.index_select(2, from));
    v.index_copy_(2, to, c.v_codes.index_select(2, from));
    if (per_token(q)) {
      ks.index_copy_(2, to, c.k_scale.index_select(2, from));
      vs.index_copy_(2, to, c.v_scale.index_select(2, from));
    }
  }
  c.k_codes = k, c.v_codes = v, c.slots = slots, c.held = n;
  if (per_token(q)) c.k_scale = ks, c.v_scale = vs;
}

void update(Fp8Cache& c, const Tensor& k, const Tensor& v, int64_t start, KvQuantization q,
            const Fp8KvCacheHooks& hooks) {
  if (start != c.end) {
    throw Error(where(c) + "update at index " + std::to_string(start) + " but the cache ends at " + std::to_string(c.end));
  }
  const int64_t n = k.size(2);
  if (c.spec.window == 0 && start + n > c.spec.capacity) {
    throw Error(where(c) + "index " + std::to_string(start + n - 1) + " is past the capacity " + std::to_string(c.spec.capacity));
  }
  // What this step's queries and a rollback after it may see: as the reference's cache keeps.
  int64_t first = c.end - c.held, slots = c.spec.capacity;
  if (c.spec.window > 0) {
    first = std::max(first, std::min(start, start + n - c.spec.max_rollback) - c.spec.window + 1);
    slots = std::max(start + n - first, c.spec.window + c.spec.max_rollback);
  }
  if (slots != c.slots) resize(c, slots, first, q);
  if (!per_token(q) && !c.k_scale.defined()) {
    const auto calibrate = [&](const Tensor& x) {
      return fp8_scales(hooks.calibration_values ? hooks.calibration_values(x, c.spec) : x, q);
    };
    c.k_scale = calibrate(k), c.v_scale = calibrate(v);
  }
  const Tensor to = slot_index(start, n, c.slots, k.device());
  const Tensor ks = per_token(q) ? fp8_scales(k, q) : c.k_scale, vs = per_token(q) ? fp8_scales(v, q) : c.v_scale;
  c.k_codes.index_copy_(2, to, fp8_encode(k, ks).view(torch::kUInt8));
  c.v_codes.index_copy_(2, to, fp8_encode(v, vs).view(torch::kUInt8));
  if (per_token(q)) c.k_scale.index_copy_(2, to, ks), c.v_scale.index_copy_(2, to, vs);
  c.end = start + n;
  c.held = c.end - first;
}

// The held entries decoded to `dtype`, oldest first.
CacheContents decoded(const Fp8Cache& c, KvQuantization q, const Fp8KvCacheHooks& hooks, torch::ScalarType dtype) {
  const int64_t first = c.end - c.held;
  const Tensor slots = slot_index(first, c.held, c.slots, c.spec.device);
  const auto decode = [&](const Tensor& codes, const Tensor& scale) {
    Tensor s = scale;
    if (per_token(q)) s = scale.index_select(2, hooks.scale_slots ? hooks.scale_slots(slots) : slots);
    return fp8_decode(codes.index_select(2, slots).view(at::kFloat8_e4m3fn), s, dtype);
  };
  const Tensor k = decode(c.k_codes, c.k_scale);
  const bool k_as_v = hooks.full_layers_read_k_as_v && c.spec.type == LayerType::kFull;
  return {k, k_as_v ? k : decode(c.v_codes, c.v_scale), first};
}

}  // namespace

KvCacheOps fp8_kv_cache_ops(KvQuantization q, Fp8KvCacheHooks hooks) {
  if (q == KvQuantization::kNone) throw Error("fp8_kv_cache_ops: KvQuantization::kNone is not an fp8 cache");
  KvCacheOps ops;
  ops.quantization = q;
  ops.make = [](const CacheSpec& spec) {
    auto c = std::make_unique<Fp8Cache>();
    c->spec = spec;
    return std::unique_ptr<LayerKvCache>(std::move(c));
  };
  ops.update = [q, hooks](LayerKvCache& base, const Tensor& k, const Tensor& v, int64_t start) {
    update(dynamic_cast<Fp8Cache&>(base), k, v, start, q, hooks);
  };
  ops.attention = [q, hooks](const Tensor& query, const LayerKvCache& base, const DecodeAttentionSpec& spec) {
    const CacheContents held = decoded(dynamic_cast<const Fp8Cache&>(base), q, hooks, torch::kFloat32);
    return attend_entries(query.to(torch::kFloat32), held, spec).to(query.scalar_type());
  };
  ops.contents = [q, hooks](const LayerKvCache& base) {
    const auto& c = dynamic_cast<const Fp8Cache&>(base);
    return decoded(c, q, hooks, c.spec.dtype);
  };
  ops.rollback = [](LayerKvCache& base, int64_t n) {
    auto& c = dynamic_cast<Fp8Cache&>(base);
    check_rollback(c.spec, n, c.held);
    c.end -= n, c.held -= n;
  };
  return ops;
}

}  // namespace gemma4::impl
