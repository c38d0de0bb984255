// The cuda backend's KvCacheOps (kv_cache_op.h).
//
// Layout and memory. Every cache is preallocated once, in the run's dtype, [B, Hkv, rows, D] for K
// and for V, and token index j lives in row j % rows; update() copies the step's k and v in place.
//  - Global layers (CacheSpec.window 0): rows = capacity, so j itself:
//    2 x B x Hkv x capacity x D x elem bytes (31B global layer, B 1, 32k tokens, bf16: 256 MiB).
//  - Sliding layers: a ring of rows = min(capacity, window - 1 + max(kMaxDecodeQueries, max_rollback)).
//    A step of c <= 16 queries sees at most window - 1 + c indices, all still in the ring after the
//    step's update, and after a rollback of n <= max_rollback entries the next query sees window - 1
//    indices before the new end, which the ring still holds (speculative decoding);
//    the memory no longer grows with the context (31B sliding layer, B 1: 2 x 16 x 1039 x 256 x 2
//    bytes = 16.2 MiB at any length; a capacity-row cache would be 512 MiB at 32k).
//    A longer step (a prefill chunk) sees more than the ring holds: its update also keeps, until
//    the next update, the keys it sees as one contiguous tensor (the ring's entries before the
//    step, then the step's own; `pending`), which that step's attention (and a KV-shared layer's)
//    reads.
// Attention: steps the decode kernel takes (decode_attention.cu: head dims 64..512, <= 16 queries,
// <= 32 query rows per kv head) go to it; the rest fall back to the fused attention kernel when the
// step sees only its own keys (a prompt at index 0) and to the reference's eager attention over the
// keys it sees otherwise.
#include "impl/cuda/kv_cache_op.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "impl/cuda/attention_op.h"
#include "impl/cuda/decode_attention_kernels.h"
#include "reference/error.h"
#include "reference/ops.h"

namespace gemma4::impl::cuda {
namespace {

using torch::Tensor;

struct Cache : LayerKvCache {
  CacheSpec spec;
  int64_t rows = 0;
  Tensor k, v;                  // [B, Hkv, rows, D]
  int64_t end = 0;              // one past the newest token index written
  int64_t last_start = 0;       // the first index of the last update
  Tensor pending_k, pending_v;  // [B, Hkv, n, D] from pending_first: a step longer than the ring allows
  int64_t pending_first = 0;
};

std::string at_layer(const CacheSpec& spec) { return "layer " + std::to_string(spec.layer) + " cuda KV cache: "; }
std::string str(int64_t x) { return std::to_string(x); }

std::unique_ptr<LayerKvCache> make(const CacheSpec& spec) {
  if (!spec.device.is_cuda()) throw Error(at_layer(spec) + "needs a CUDA device, got " + spec.device.str());
  if (spec.dtype != torch::kBFloat16 && spec.dtype != torch::kFloat16) {
    throw Error(at_layer(spec) + "holds bf16 or fp16, got " + c10::toString(spec.dtype));
  }
  if (spec.batch <= 0 || spec.kv_heads <= 0 || spec.head_dim <= 0 || spec.capacity <= 0 || spec.window < 0) {
    throw Error(at_layer(spec) + "batch, kv heads, head dim and capacity must be positive and the window >= 0");
  }
  auto cache = std::make_unique<Cache>();
  cache->spec = spec;
  // "cuda" means the current device: name it, so that tensors (which always carry an index) compare equal.
  if (!spec.device.has_index()) cache->spec.device = torch::Device(torch::kCUDA, c10::cuda::current_device());
  const int64_t spare = std::max<int64_t>(kMaxDecodeQueries, spec.max_rollback);
  cache->rows = spec.window > 0 ? std::min(spec.capacity, spec.window - 1 + spare) : spec.capacity;
  const c10::cuda::CUDAGuard guard(cache->spec.device);
  const auto options = torch::TensorOptions().dtype(spec.dtype).device(cache->spec.device);
  // Uninitialised: the kernel reads only rows an update wrote (and zero-fills the rest of a tile).
  cache->k = at::empty({spec.batch, spec.kv_heads, cache->rows, spec.head_dim}, options);
  cache->v = at::empty({spec.batch, spec.kv_heads, cache->rows, spec.head_dim}, options);
  return cache;
}

// Writes src [B, Hkv, n, D], token indices first .. first + n - 1 with n <= rows, into the ring.
void write_ring(const Tensor& ring, const Tensor& src, int64_t first) {
  const int64_t rows = ring.size(2), n = src.size(2), slot = first % rows, head = std::min(n, rows - slot);
  ring.narrow(2, slot, head).copy_(src.narrow(2, 0, head));
  if (head < n) ring.narrow(2, 0, n - head).copy_(src.narrow(2, head, n - head));
}

// Token indices first .. first + n - 1, which the ring holds: a view when they do not wrap.
Tensor read_ring(const Tensor& ring, int64_t first, int64_t n) {
  const int64_t rows = ring.size(2), slot = first % rows, head = std::min(n, rows - slot);
  if (head == n) return ring.narrow(2, slot, n);
  return at::cat({ring.narrow(2, slot, head), ring.narrow(2, 0, n - head)}, 2);
}

void check_tensor(const CacheSpec& s, const Tensor& t, const std::string& name, const std::string& expected_shape,
                  bool shape_ok) {
  if (!t.defined()) throw Error(at_layer(s) + name + " is undefined");
  if (!shape_ok)
    throw Error(at_layer(s) + name + " has shape " + shape_string(t.sizes()) + ", expected " + expected_shape);
  if (t.scalar_type() != s.dtype) {
    throw Error(at_layer(s) + name + " is " + c10::toString(t.scalar_type()) + " but the cache holds " +
                c10::toString(s.dtype));
  }
  if (t.device() != s.device) {
    throw Error(at_layer(s) + name + " is on " + t.device().str() + " but the cache is on " + s.device.str());
  }
}

void update(LayerKvCache& base, const Tensor& k, const Tensor& v, int64_t start) {
  auto& c = dynamic_cast<Cache&>(base);
  const CacheSpec& s = c.spec;
  const std::string expected = "[" + str(s.batch) + ", " + str(s.kv_heads) + ", c, " + str(s.head_dim) + "], c >= 1";
  for (const auto& [name, t] : {std::pair<const char*, const Tensor&>{"k", k}, {"v", v}}) {
    const bool shape_ok = t.defined() && t.dim() == 4 && t.size(0) == s.batch && t.size(1) == s.kv_heads &&
                          t.size(2) >= 1 && t.size(3) == s.head_dim && t.size(2) == k.size(2);
    check_tensor(s, t, name, expected + " (k and v alike)", shape_ok);
  }
  const int64_t steps = k.size(2);
  if (start != c.end)
    throw Error(at_layer(s) + "update at index " + str(start) + " but the cache ends at " + str(c.end));
  if (start + steps > s.capacity) {
    throw Error(at_layer(s) + "update of " + str(steps) + " entries at index " + str(start) + " exceeds the capacity " +
                str(s.capacity));
  }
  const c10::cuda::CUDAGuard guard(s.device);
  c.pending_k = c.pending_v = Tensor();
  if (s.window > 0) {
    const int64_t from = std::max<int64_t>(0, start - s.window + 1);  // what the step's first query sees
    if (start - from + steps > c.rows) {
      c.pending_first = from;
      c.pending_k = at::cat({read_ring(c.k, from, start - from), k}, 2);
      c.pending_v = at::cat({read_ring(c.v, from, start - from), v}, 2);
    }
  }
  const int64_t n = std::min(steps, c.rows);  // a longer step's oldest entries would be overwritten anyway
  write_ring(c.k, k.narrow(2, steps - n, n), start + steps - n);
  write_ring(c.v, v.narrow(2, steps - n, n), start + steps - n);
  c.last_start = start;
  c.end = start + steps;
}

Tensor decode_kernel(const Cache& c, const Tensor& q, const Tensor& padding, int64_t window, int64_t first_key,
                     int64_t start) {
  const CacheSpec& s = c.spec;
  DecodeAttentionArgs a;
  a.batch = int(s.batch);
  a.queries = int(q.size(1));
  a.q_heads = int(q.size(2));
  a.kv_heads = int(s.kv_heads);
  a.head_dim = int(s.head_dim);
  a.rows = c.rows;
  a.start = start;
  a.window = window;
  a.first_key = first_key;
  a.q = q.data_ptr();
  a.k = c.k.data_ptr();
  a.v = c.v.data_ptr();
  if (padding.defined()) {
    a.padding = padding.data_ptr<int64_t>();
    a.padding_stride = padding.size(1);
  }
  Tensor out = at::empty_like(q);
  a.out = out.data_ptr();
  const DecodePlan plan = plan_decode_attention(attention_kernel_dtype(s.dtype), a);
  Tensor workspace;
  if (plan.workspace_bytes > 0) {
    workspace = at::empty({int64_t(plan.workspace_bytes)}, q.options().dtype(torch::kUInt8));
  }
  const char* error =
      launch_decode_attention(attention_kernel_dtype(s.dtype), a, plan, workspace.defined() ? workspace.data_ptr() : nullptr,
                              at::cuda::getCurrentCUDAStream());
  if (error[0] != '\0') throw Error(at_layer(s) + error);
  return out.view({q.size(0), q.size(1), q.size(2) * q.size(3)});
}

Tensor attention(const Tensor& q_in, const LayerKvCache& base, const DecodeAttentionSpec& spec) {
  const auto& c = dynamic_cast<const Cache&>(base);
  const CacheSpec& s = c.spec;
  const bool shape_ok = q_in.defined() && q_in.dim() == 4 && q_in.size(0) == s.batch && q_in.size(1) >= 1 &&
                        q_in.size(2) % s.kv_heads == 0 && q_in.size(2) > 0 && q_in.size(3) == s.head_dim;
  check_tensor(s, q_in, "q",
               "[" + str(s.batch) + ", c, a multiple of " + str(s.kv_heads) + ", " + str(s.head_dim) + "]", shape_ok);
  const int64_t steps = q_in.size(1), start = spec.start;
  if (c.end == 0 || start != c.last_start || start + steps != c.end) {
    throw Error(at_layer(s) + "attention for indices " + str(start) + ".." + str(start + steps - 1) +
                " but the last update wrote " + str(c.last_start) + ".." + str(c.end - 1) +
                (spec.kv_shared ? " (a KV-shared layer reads its source's cache after the source's update)" : ""));
  }
  if (spec.type == LayerType::kSliding && spec.sliding_window <= 0) {
    throw Error(at_layer(s) + "sliding window " + str(spec.sliding_window) + " must be positive");
  }
  const int64_t window = spec.type == LayerType::kSliding ? spec.sliding_window : 0;
  const int64_t first_key = window > 0 ? std::max<int64_t>(0, start - window + 1) : 0;
  const int64_t held = c.pending_k.defined() ? c.pending_first : std::max<int64_t>(0, c.end - c.rows);
  if (first_key < held) {
    throw Error(at_layer(s) + "the step's queries see index " + str(first_key) + " but the cache holds indices from " +
                str(held) + " (its window is " + str(s.window) + ", the step's " + str(window) + ")");
  }
  Tensor padding;
  if (spec.padding.defined()) {
    if (spec.padding.dim() != 2 || spec.padding.size(0) != s.batch || spec.padding.size(1) < c.end) {
      throw Error(at_layer(s) + "padding has shape " + shape_string(spec.padding.sizes()) + ", expected [" +
                  str(s.batch) + ", >= " + str(c.end) + "]");
    }
    padding = spec.padding.to(s.device, torch::kInt64).contiguous();
  }
  const c10::cuda::CUDAGuard guard(s.device);
  Tensor q = q_in.contiguous();
  if (reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 != 0) q = q.clone();  // the kernel reads 4-byte pairs
  const int64_t q_heads = q.size(2);
  if (!c.pending_k.defined() &&
      decode_attention_supported(int(s.head_dim), int(q_heads), int(s.kv_heads), int(steps))) {
    return decode_kernel(c, q, padding, window, first_key, start);
  }
  // Fallbacks: the keys the step sees, contiguous.
  const int64_t first = c.pending_k.defined() ? c.pending_first : first_key;
  const Tensor k = c.pending_k.defined() ? c.pending_k : read_ring(c.k, first, c.end - first);
  const Tensor v = c.pending_v.defined() ? c.pending_v : read_ring(c.v, first, c.end - first);
  if (first == start && s.head_dim <= 512) {  // a prompt from index 0: the fused prefill kernel
    const AttentionSpec prefill{spec.type, spec.sliding_window, /*bidirectional=*/false,
                                padding.defined() ? padding.slice(1, start, start + steps) : Tensor()};
    return fused_attention(q, k.contiguous(), v.contiguous(), prefill);
  }
  DecodeAttentionSpec mask_spec = spec;
  mask_spec.padding = padding.defined() ? padding : at::ones({s.batch, c.end}, q.options().dtype(torch::kInt64));
  const Tensor mask = decode_attention_mask(mask_spec, steps, first, k.size(2), q.scalar_type(), q.device());
  return eager_attention(q, k, v, mask);
}

// Only the end moves back: the rolled-back rows are overwritten by the next update, and the rows
// before the new end are intact (the ring's spare rows, see the top of the file).
void rollback(LayerKvCache& base, int64_t n) {
  auto& c = dynamic_cast<Cache&>(base);
  check_rollback(c.spec, n, c.end);
  c.end -= n;
  c.last_start = std::min(c.last_start, c.end);
  c.pending_k = c.pending_v = Tensor();
}

CacheContents contents(const LayerKvCache& base) {
  const auto& c = dynamic_cast<const Cache&>(base);
  if (c.pending_k.defined()) return {c.pending_k, c.pending_v, c.pending_first};
  // What the reference keeps: a sliding layer the last window - 1 indices before its last step, and the step's.
  const int64_t first = c.spec.window > 0 ? std::max<int64_t>(0, c.last_start - c.spec.window + 1) : 0;
  const c10::cuda::CUDAGuard guard(c.spec.device);
  return {read_ring(c.k, first, c.end - first).clone(), read_ring(c.v, first, c.end - first).clone(), first};
}

}  // namespace

const KvCacheOps& kv_cache_ops() {
  static const KvCacheOps ops{make, update, attention, contents, rollback};
  return ops;
}

}  // namespace gemma4::impl::cuda
