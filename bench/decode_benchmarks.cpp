// decode_attention_sliding and decode_attention_global: the attention of one decoding step (one
// query per sequence, c = 1) against a K/V cache of T tokens (the query is token T - 1), at a
// geometry's first sliding or global layer (its q heads, kv heads and head dim; the sliding window
// from the config, so a sliding layer sees min(T, window) keys), batch 1, 8, 64, T 4096 and 32768:
//  - every measured backend with its own KvCacheOps (the cuda backends: preallocated caches and
//    the split-K decode kernel), and `reference` (the reference's contiguous cache and eager
//    attention): KvCacheOps::attention on the filled cache, with an all-ones padding mask as
//    Model::decode passes one;
//  - `sdpa`: at::scaled_dot_product_attention of q [B, Hq, 1, D] over exactly the keys the query
//    sees (the reference cache's contents, contiguous, no mask), in its fairest form: enable_gqa
//    with SDPA's own dispatch, or K and V repeated to Hq heads beforehand (untimed) where that is
//    faster; both are tried when the case is built and the label names the form and the SDPA
//    backend that ran.
// Named decode_attention_<layer>/<backend>/cuda/<geometry>/<T>/<dtype>/b<B>. Only the attention
// call is timed (timing.h: L2 flushed, CUDA events), not the cache update. Counters: GB/s by the
// byte model below, tokens/s (B / step time), us_per_step, bytes_per_step; bench/README.md
// ("Decode attention") states the model and the whole-model bounds.
//
// Bytes per step = K and V of the keys seen, B Hkv T_seen D elem x 2, + q and the output, 2 B Hq D
// elem. K=V global layers (31B) still cache two tensors: k = rope(norm(kr) w_k) and v = norm(kr)
// differ, and KvCacheOps::update receives both.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "bench/case_cache.h"
#include "bench/device.h"
#include "bench/registration.h"
#include "bench/run.h"
#include "bench/skip.h"
#include "reference/kv_cache.h"

namespace gemma4::bench {
namespace {

using torch::Tensor;

constexpr int64_t kBatches[] = {1, 8, 64};
constexpr int64_t kCacheLens[] = {4096, 32768};

struct DecodeShape {
  const char* op;
  LayerType type;
  int layer;
  int64_t q_heads, kv_heads, head_dim, window;  // window 0: global
  int64_t seen(int64_t T) const { return window > 0 ? std::min(T, window) : T; }
};

DecodeShape shape_of(const Config& c, LayerType type) {
  const LayerSpec& layer = layer_of_type(c, type);
  const bool sliding = type == LayerType::kSliding;
  return {sliding ? "decode_attention_sliding" : "decode_attention_global",
          type,
          int(&layer - c.layers.data()),
          c.num_attention_heads,
          layer.num_kv_heads,
          layer.head_dim,
          sliding ? c.sliding_window : 0};
}

// The byte model (above) and the memory estimates (generous: the fill's chunks, the reference's
// concatenation, eager attention's K and V repeated to Hq heads and its fp32 scores).
struct Sizes {
  double step, kv_seen, kv_cache, fill, repeated, scores;
};
Sizes sizes_of(const DecodeShape& s, int64_t B, int64_t T, int64_t elem) {
  const double row = double(B) * s.kv_heads * s.head_dim * elem * 2;  // K and V of one token index
  const double seen = double(s.seen(T));
  Sizes z;
  z.kv_seen = row * seen;
  z.step = z.kv_seen + 2.0 * B * s.q_heads * s.head_dim * elem;
  z.kv_cache = row * (s.window > 0 ? double(std::min(T, s.window + 15)) : double(T));
  z.fill = row * double(s.window > 0 ? std::min(s.window, T - 1) : T - 1);
  z.repeated = z.kv_seen * double(s.q_heads / s.kv_heads);
  z.scores = 3.0 * B * s.q_heads * seen * 4;
  return z;
}

std::string case_name(const DecodeShape& s, const std::string& backend, const Geometry& g, int64_t T, int64_t B) {
  return std::string(s.op) + "/" + backend + "/cuda/" + g.name + "/" + std::to_string(T) + "/" + dtype_name(g.dtype) +
         "/b" + std::to_string(B);
}

void set_counters(benchmark::State& state, int64_t B, double bytes) {
  state.counters["tokens/s"] = benchmark::Counter(double(B), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["us_per_step"] =
      benchmark::Counter(1e-6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["bytes_per_step"] = bytes;
}

// T - 1 random entries, then the step's own at index T - 1: sliding layers in window-sized chunks
// (the reference's cache concatenates, so chunks keep its fill linear), global layers in one.
void fill(const KvCacheOps& ops, LayerKvCache& cache, const DecodeShape& s, int64_t B, int64_t T,
          const torch::TensorOptions& options) {
  const int64_t chunk = s.window > 0 ? std::min(s.window, T - 1) : T - 1;
  const Tensor k = at::randn({B, s.kv_heads, chunk, s.head_dim}, options);
  const Tensor v = at::randn({B, s.kv_heads, chunk, s.head_dim}, options);
  for (int64_t at = 0; at < T - 1; at += chunk) {
    const int64_t n = std::min(chunk, T - 1 - at);
    ops.update(cache, k.narrow(2, 0, n), v.narrow(2, 0, n), at);
  }
  ops.update(cache, k.narrow(2, 0, 1).clone(), v.narrow(2, 0, 1).clone(), T - 1);
}

struct CacheCase {
  std::unique_ptr<LayerKvCache> cache;
  Tensor q;  // [B, 1, Hq, D]
  DecodeAttentionSpec spec;
};

CacheCase make_cache_case(const KvCacheOps& ops, const Geometry& g, const DecodeShape& s, int64_t B, int64_t T) {
  const auto options = torch::TensorOptions().dtype(g.dtype).device(g.device);
  CacheSpec spec{s.layer, s.type, B, s.kv_heads, s.head_dim, s.window, T, g.dtype, g.device};
  CacheCase c;
  c.cache = ops.make(spec);
  fill(ops, *c.cache, s, B, T, options);
  // RMS-normalised queries and keys: scores of a few units.
  c.q = at::randn({B, 1, s.q_heads, s.head_dim}, options) * (2.5 / std::sqrt(double(s.head_dim)));
  c.spec = {s.type, s.window, T - 1, at::ones({B, T}, options.dtype(torch::kInt64)), false};
  return c;
}

void register_cache_case(const std::string& backend, const KvCacheOps& ops, const Geometry& g, const DecodeShape& s,
                         int64_t B, int64_t T) {
  const std::string name = case_name(s, backend, g, T, B);
  const Sizes z = sizes_of(s, B, T, g.element_bytes());
  const bool eager = backend == "reference";
  const double needed = z.kv_cache + 3 * z.fill + (eager ? 2 * z.kv_seen + 2 * z.repeated + z.scores : 0);
  register_benchmark(name, [&ops, &g, s, B, T, name, z, needed, eager](benchmark::State& state) {
    run_benchmark(state, g.device, Work{0, z.step}, kWarmup, [&] {
      CacheCase& c = cached_case<CacheCase>(name, g.device, needed, [&] { return make_cache_case(ops, g, s, B, T); });
      state.SetLabel(eager ? "eager attention over the contiguous cache" : "its KvCacheOps::attention");
      return [&ops, &c] {
        at::NoGradGuard no_grad;
        ops.attention(c.q, *c.cache, c.spec);
      };
    });
    if (!state.error_occurred()) set_counters(state, B, z.step);
  });
}

struct SdpaCase {
  Tensor q, k, v;  // q [B, Hq, 1, D]; k and v [B, Hkv or Hq, T_seen, D]
  bool gqa = true;
  std::string label;
};

const char* sdpa_backend_name(int64_t choice) {
  switch (choice) {
    case 0:
      return "math";
    case 1:
      return "flash";
    case 2:
      return "efficient";
    case 3:
      return "cudnn";
    default:
      return "other";
  }
}

// Seconds per call, the best of 5 rounds of 4 calls after one untimed; nullopt when SDPA refuses
// the form or it does not fit (the math backend repeats K and V itself). Rounds rather than one
// long run: a decode step is tens of microseconds, and one slow round must not pick the form.
std::optional<double> quick_time(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::Error&) {  // c10::OutOfMemoryError among them
    return std::nullopt;
  }
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    torch::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i) call();
    torch::cuda::synchronize();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 4);
  }
  return best;
}

SdpaCase make_sdpa_case(const Geometry& g, const DecodeShape& s, int64_t B, int64_t T, const Sizes& z) {
  const CacheCase c = make_cache_case(reference_kv_cache_ops(), g, s, B, T);
  const CacheContents seen = reference_kv_cache_ops().contents(*c.cache);  // exactly the keys the query sees
  SdpaCase out{c.q.transpose(1, 2), seen.k.contiguous(), seen.v.contiguous(), true, ""};
  auto sdpa = [&out](const Tensor& k, const Tensor& v, bool gqa) {
    return [q = out.q, k, v, gqa] {
      at::NoGradGuard no_grad;
      at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false, 1.0, gqa);
    };
  };
  auto choice = [&out](const Tensor& k, const Tensor& v, bool gqa) {
    try {
      return std::string(sdpa_backend_name(at::_fused_sdp_choice(out.q, k, v, std::nullopt, 0.0, false, 1.0, gqa)));
    } catch (const c10::Error&) {
      return std::string("none");
    }
  };
  // The repeated copies first, so that neither form is timed right after its tensors were written.
  Tensor k_rep, v_rep;
  const int64_t group = s.q_heads / s.kv_heads;
  if (group > 1 && 3 * z.repeated < double(free_device_bytes(g.device))) {
    k_rep = out.k.repeat_interleave(group, 1);
    v_rep = out.v.repeat_interleave(group, 1);
  }
  const std::optional<double> grouped = quick_time(sdpa(out.k, out.v, true));
  const std::optional<double> repeated = k_rep.defined() ? quick_time(sdpa(k_rep, v_rep, false)) : std::nullopt;
  if (!grouped && !repeated) {
    throw Skip("not supported: SDPA refuses the shape, or it does not fit, with enable_gqa and with K/V repeated");
  }
  // enable_gqa reads the cache as it is; the repeated form must win clearly (10%) to be chosen.
  if (repeated && (!grouped || *repeated < 0.9 * *grouped)) {
    out.label = "K/V repeated to " + std::to_string(s.q_heads) + " heads (untimed), " + choice(k_rep, v_rep, false);
    out.k = k_rep;
    out.v = v_rep;
    out.gqa = false;
  } else {
    out.label = std::string(group > 1 ? "enable_gqa, " : "") + choice(out.k, out.v, true);
  }
  return out;
}

void register_sdpa_case(const Geometry& g, const DecodeShape& s, int64_t B, int64_t T) {
  const std::string name = case_name(s, "sdpa", g, T, B);
  const Sizes z = sizes_of(s, B, T, g.element_bytes());
  const double needed = z.kv_cache + 3 * z.fill + 2 * z.kv_seen + 2 * z.repeated + z.scores;
  register_benchmark(name, [&g, s, B, T, name, z, needed](benchmark::State& state) {
    run_benchmark(state, g.device, Work{0, z.step}, kWarmup, [&] {
      SdpaCase& c = cached_case<SdpaCase>(name, g.device, needed, [&] { return make_sdpa_case(g, s, B, T, z); });
      state.SetLabel(c.label);
      return [&c] {
        at::NoGradGuard no_grad;
        at::scaled_dot_product_attention(c.q, c.k, c.v, std::nullopt, 0.0, false, 1.0, c.gqa);
      };
    });
    if (!state.error_occurred()) set_counters(state, B, z.step);
  });
}

}  // namespace

// The released 31B and E4B geometries on CUDA in bf16 and fp16.
void register_decode_benchmarks(const Suite& suite) {
  for (const Geometry& g : suite.geometries) {
    if ((g.name != "31b" && g.name != "e4b") || !g.device.is_cuda() || g.dtype == torch::kFloat32) continue;
    for (LayerType type : {LayerType::kSliding, LayerType::kFull}) {
      const DecodeShape s = shape_of(g.config, type);
      for (int64_t T : kCacheLens) {
        for (int64_t B : kBatches) {
          for (const impl::Backend& b : suite.backends) {
            // Backends without their own cache run the reference's: measured once, as `reference`.
            if (b.name == "reference") register_cache_case(b.name, reference_kv_cache_ops(), g, s, B, T);
            if (!b.kv_cache.make) continue;
            const std::string unsupported = b.capabilities.unsupported(g.device, g.dtype, s.head_dim, s.window);
            if (unsupported.empty()) {
              register_cache_case(b.name, b.kv_cache, g, s, B, T);
            } else {
              register_backend_benchmark(case_name(s, b.name, g, T, B), b, unsupported, nullptr);
            }
          }
          register_sdpa_case(g, s, B, T);
        }
      }
    }
  }
}

}  // namespace gemma4::bench
