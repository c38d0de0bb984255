// sliding_attention, global_attention and causal_attention_sliding_shape: one attention call at a
// geometry's layer shape (batch 1, causal, scale 1), timed for
//  - every measured backend: its LayerOps::attention, q [B, S, Hq, D], k and v [B, Hkv, S, D] ->
//    [B, S, Hq * D] (skipped as not supported where its capabilities exclude the device, dtype,
//    head dim or window);
//  - LibTorch's scaled_dot_product_attention with one SDPA backend enabled at a time (sdpa-flash,
//    sdpa-efficient, sdpa-math, sdpa-cudnn), on q viewed as [B, Hq, S, D]. Sliding layers pass the
//    band as an explicit additive [1, 1, S, S] mask (the reference's attention_mask, built outside
//    the timed region); the causal ones pass is_causal. GQA goes through enable_gqa; when the SDPA
//    backend refuses that, K and V are repeated to Hq heads (repeat_interleave, outside the timed
//    region; gradients are then taken w.r.t. the repeated tensors). The label says which. A case
//    the SDPA backend refuses either way is skipped with "not supported: " and SDPA's reasons.
// The ops:
//  - sliding_attention: the first sliding layer's heads and head dim, the config's window;
//  - global_attention: the first global layer's, full causal;
//  - causal_attention_sliding_shape: the sliding layer's heads and head dim (31B: 32 q heads,
//    16 kv heads, D 256) with a full causal mask and no window (a global-type AttentionSpec). It is
//    the sliding kernel's peer figure: SDPA takes a band only as an explicit mask, over which its
//    kernels compute every S x S tile (the band's rate is poor for SDPA, not a fair rival), while
//    its causal kernels (cuDNN's above all) skip the tiles above the diagonal; their TFLOP/s at the
//    same S and head dim (FLOP model: attention_work with window 0) is the rate a sliding kernel's
//    TFLOP/s is held against.
// K and V are always two random tensors, also where the layer has attention_k_eq_v (31B global
// layers): the peer libraries are measured on distinct K and V, and a kernel must not get its rate
// from reading one tensor twice. Gradients (fwdbwd) are taken w.r.t. q, k and v.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>
#include <vector>

#include "bench/case_cache.h"
#include "bench/memory_estimate.h"
#include "bench/registration.h"
#include "bench/run.h"
#include "bench/skip.h"
#include "reference/ops.h"

namespace gemma4::bench {
namespace {

using torch::Tensor;

struct AttentionOp {
  const char* name;
  LayerType shape;  // whose heads and head dim (layer_of_type)
  LayerType mask;   // kSliding: causal with the config's window; kFull: causal, no window
};
constexpr AttentionOp kOps[] = {{"sliding_attention", LayerType::kSliding, LayerType::kSliding},
                                {"causal_attention_sliding_shape", LayerType::kSliding, LayerType::kFull},
                                {"global_attention", LayerType::kFull, LayerType::kFull}};

struct SdpaKernel {
  const char* name;
  at::SDPBackend backend;
};
constexpr SdpaKernel kSdpaKernels[] = {{"sdpa-flash", at::SDPBackend::flash_attention},
                                       {"sdpa-efficient", at::SDPBackend::efficient_attention},
                                       {"sdpa-math", at::SDPBackend::math},
                                       {"sdpa-cudnn", at::SDPBackend::cudnn_attention}};

struct Shape {
  int64_t q_heads, kv_heads, head_dim;
  int64_t window;  // 0: full causal
  AttentionSpec spec;
};

Shape shape_of(const Config& c, const AttentionOp& op) {
  const LayerSpec& layer = layer_of_type(c, op.shape);
  return {c.num_attention_heads, layer.num_kv_heads, layer.head_dim,
          op.mask == LayerType::kSliding ? c.sliding_window : 0, attention_spec(c, op.mask, Tensor())};
}

AttentionFootprint footprint(const Shape& s, const Geometry& g, int64_t S, bool backward, bool dense_scores,
                             bool mask) {
  return {s.q_heads, s.kv_heads, s.head_dim, S, g.element_bytes(), backward, dense_scores, mask};
}

struct Inputs {
  Tensor q;                       // [1, S, Hq, D]
  Tensor k, v;                    // [1, Hkv, S, D]; distinct on K=V layers too
  Tensor upstream;                // the output's shape; backward only
  Tensor mask;                    // SDPA on sliding layers: additive [1, 1, S, S]
  Tensor k_repeated, v_repeated;  // SDPA backends without GQA: [1, Hq, S, D], made on demand
};

Inputs make_inputs(const Geometry& g, const Shape& s, int64_t S, bool backward, bool sdpa) {
  const auto opts = torch::TensorOptions().dtype(g.dtype).device(g.device);
  Inputs in;
  in.q = at::randn({1, S, s.q_heads, s.head_dim}, opts).requires_grad_(backward);
  in.k = at::randn({1, s.kv_heads, S, s.head_dim}, opts).requires_grad_(backward);
  in.v = at::randn({1, s.kv_heads, S, s.head_dim}, opts).requires_grad_(backward);
  if (backward) {
    in.upstream =
        sdpa ? at::randn({1, s.q_heads, S, s.head_dim}, opts) : at::randn({1, S, s.q_heads * s.head_dim}, opts);
  }
  if (sdpa && s.window > 0) in.mask = attention_mask(s.spec, 1, S, g.dtype, g.device);
  return in;
}

void register_backend_case(const impl::Backend& b, const Geometry& g, const AttentionOp& op, int64_t S, bool backward) {
  const Shape s = shape_of(g.config, op);
  const std::string unsupported = b.capabilities.unsupported(g.device, g.dtype, s.head_dim, s.window);
  const std::string name = benchmark_name(op.name, b.name, g, S, backward);
  const Work work = attention_work(1, s.q_heads, s.head_dim, S, s.window, backward);
  const bool eager = materialises_scores(b.ops);
  const double bytes = attention_bytes(footprint(s, g, S, backward, eager, /*mask=*/eager));
  register_backend_benchmark(
      name, b, unsupported, [&b, &g, s, S, backward, name, work, bytes](benchmark::State& state) {
        run_benchmark(state, g.device, work, kWarmup, [&] {
          const Inputs& in =
              cached_case<Inputs>(name, g.device, bytes, [&] { return make_inputs(g, s, S, backward, false); });
          return op_step(backward,
                         [&b, &in, &s] { return std::vector<Tensor>{b.ops.attention(in.q, in.k, in.v, s.spec)}; },
                         {in.q, in.k, in.v}, {in.upstream});
        });
      });
}

// Enables only `backend` among SDPA's backends while it lives, then restores the global flags.
class OnlySdpaBackend {
 public:
  explicit OnlySdpaBackend(at::SDPBackend backend)
      : flash_(ctx().userEnabledFlashSDP()),
        efficient_(ctx().userEnabledMemEfficientSDP()),
        math_(ctx().userEnabledMathSDP()),
        cudnn_(ctx().userEnabledCuDNNSDP()) {
    set(backend == at::SDPBackend::flash_attention, backend == at::SDPBackend::efficient_attention,
        backend == at::SDPBackend::math, backend == at::SDPBackend::cudnn_attention);
  }
  ~OnlySdpaBackend() { set(flash_, efficient_, math_, cudnn_); }
  OnlySdpaBackend(const OnlySdpaBackend&) = delete;
  OnlySdpaBackend& operator=(const OnlySdpaBackend&) = delete;

 private:
  static at::Context& ctx() { return at::globalContext(); }
  static void set(bool flash, bool efficient, bool math, bool cudnn) {
    ctx().setSDPUseFlash(flash);
    ctx().setSDPUseMemEfficient(efficient);
    ctx().setSDPUseMath(math);
    ctx().setSDPUseCuDNN(cudnn);
  }
  bool flash_, efficient_, math_, cudnn_;
};

// SDPA explains why a kernel cannot run in warnings, then throws "No available kernel": keep them.
class CollectWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    // "... has been runtime disabled" is our own doing (OnlySdpaBackend).
    if (warning.msg().find("disabled") == std::string::npos) messages_ += warning.msg() + "; ";
  }
  const std::string& messages() const { return messages_; }

 private:
  std::string messages_;
};

// Runs `step` once; "" when it ran, else why SDPA refused (out-of-memory errors propagate).
std::string refusal(const std::function<void()>& step) {
  CollectWarnings warnings;
  c10::WarningUtils::WarningHandlerGuard guard(&warnings);
  try {
    step();
    return "";
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    return (warnings.messages() + what.substr(0, what.find('\n'))).substr(0, 600);
  }
}

void register_sdpa_case(const SdpaKernel& kernel, const Geometry& g, const AttentionOp& op, int64_t S, bool backward) {
  const Shape s = shape_of(g.config, op);
  const std::string name = benchmark_name(op.name, kernel.name, g, S, backward);
  const Work work = attention_work(1, s.q_heads, s.head_dim, S, s.window, backward);
  const bool dense = kernel.backend == at::SDPBackend::math;
  const double bytes = attention_bytes(footprint(s, g, S, backward, dense, /*mask=*/s.window > 0));
  register_benchmark(name, [&kernel, &g, s, S, backward, name, work, bytes](benchmark::State& state) {
    run_benchmark(state, g.device, work, kWarmup, [&] {
      Inputs& in = cached_case<Inputs>(name, g.device, bytes, [&] { return make_inputs(g, s, S, backward, true); });
      auto step_with = [&](const Tensor& k, const Tensor& v, bool gqa) {
        return op_step(backward,
                       [&in, &kernel, &s, k, v, gqa] {
                         OnlySdpaBackend only(kernel.backend);
                         const std::optional<Tensor> mask =
                             in.mask.defined() ? std::optional<Tensor>(in.mask) : std::nullopt;
                         return std::vector<Tensor>{
                             at::scaled_dot_product_attention(in.q.transpose(1, 2), k, v, mask, 0.0,
                                                              /*is_causal=*/s.window == 0, /*scale=*/1.0, gqa)};
                       },
                       {in.q, k, v}, {in.upstream});
      };
      const std::string masking = s.window > 0 ? "band mask" : "is_causal";
      const bool grouped = s.q_heads != s.kv_heads;
      std::function<void()> step = step_with(in.k, in.v, grouped);
      std::string why = refusal(step);
      if (why.empty()) {
        state.SetLabel(masking + (grouped ? ", enable_gqa" : ""));
        return step;
      }
      if (!grouped) throw Skip("not supported: " + why);
      if (!in.k_repeated.defined()) {
        const int64_t group = s.q_heads / s.kv_heads;
        in.k_repeated = in.k.detach().repeat_interleave(group, 1).requires_grad_(backward);
        in.v_repeated = in.v.detach().repeat_interleave(group, 1).requires_grad_(backward);
      }
      step = step_with(in.k_repeated, in.v_repeated, false);
      const std::string why_repeated = refusal(step);
      if (!why_repeated.empty()) throw Skip("not supported (with enable_gqa, and with K/V repeated): " + why_repeated);
      state.SetLabel(masking + ", K/V repeated to " + std::to_string(s.q_heads) + " heads (untimed)");
      return step;
    });
  });
}

}  // namespace

void register_attention_benchmarks(const Suite& suite) {
  for (const AttentionOp& op : kOps) {
    for (const Geometry& g : suite.geometries) {
      if (!g.measures(op.name)) continue;
      for (int64_t S : g.seq_lens) {
        for (bool backward : {false, true}) {
          for (const impl::Backend& b : suite.backends) register_backend_case(b, g, op, S, backward);
          for (const SdpaKernel& kernel : kSdpaKernels) register_sdpa_case(kernel, g, op, S, backward);
        }
      }
    }
  }
}

}  // namespace gemma4::bench
