// moe_experts: LayerOps::moe_experts at a MoE geometry's shapes (26B-A4B: 128 experts, top 8,
// hidden 2816, expert intermediate 704), batch 1, T = S tokens, for every measured backend (skipped
// as not supported where its capabilities exclude the device or dtype):
//   x [T, H] standard normal (the normed tokens); top_index [T, K] int64 and top_weights [T, K]
//   fp32 from a router as the reference's moe() makes them, built outside the timed region:
//   softmax over the E experts of x router^T (router [E, H], random), top K, renormalised, times a
//   per-expert scale. A random router spreads the tokens about evenly over the experts; a trained
//   one may not. gate_up_proj [E, 2I, H] and down_proj [E, H, I] (run.h: device_weight) -> [T, H].
//   fwdbwd: the gradient w.r.t. x, top_weights, gate_up_proj and down_proj.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "bench/case_cache.h"
#include "bench/memory_estimate.h"
#include "bench/registration.h"
#include "bench/run.h"

namespace gemma4::bench {
namespace {

using torch::Tensor;

const char* const kOp = "moe_experts";

struct Case {
  Tensor x, top_index, top_weights, gate_up_proj, down_proj, upstream;
};

Case make_case(const Geometry& g, int64_t S, bool backward) {
  const Config& c = g.config;
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate_size;
  const auto opts = torch::TensorOptions().dtype(g.dtype).device(g.device);
  Case k;
  k.x = at::randn({S, H}, opts);
  {
    at::NoGradGuard no_grad;
    const Tensor probs = at::softmax(at::linear(k.x, device_weight({E, H}, opts)), -1, torch::kFloat32);
    auto [top_weights, top_index] = probs.topk(c.top_k_experts, -1);
    top_weights = top_weights / top_weights.sum(-1, /*keepdim=*/true);
    k.top_weights = top_weights * device_weight({E}, probs.options()).index({top_index});
    k.top_index = top_index;
  }
  k.gate_up_proj = device_weight({E, 2 * I, H}, opts);
  k.down_proj = device_weight({E, H, I}, opts);
  for (Tensor* t : {&k.x, &k.top_weights, &k.gate_up_proj, &k.down_proj}) t->requires_grad_(backward);
  if (backward) k.upstream = at::randn({S, H}, opts);
  return k;
}

void register_case(const impl::Backend& b, const Geometry& g, int64_t S, bool backward) {
  const Config& c = g.config;
  const std::string name = benchmark_name(kOp, b.name, g, S, backward);
  const Work work = moe_experts_work(S, c.top_k_experts, c.hidden_size, c.moe_intermediate_size, backward);
  const double bytes = moe_experts_bytes(S, c.top_k_experts, c.num_experts, c.hidden_size, c.moe_intermediate_size,
                                         g.element_bytes(), backward);
  register_backend_benchmark(
      name, b, b.capabilities.unsupported(g.device, g.dtype),
      [&b, &g, S, backward, name, work, bytes](benchmark::State& state) {
        run_benchmark(state, g.device, work, kWarmup, [&] {
          const Case& k = cached_case<Case>(name, g.device, bytes, [&] { return make_case(g, S, backward); });
          return op_step(backward,
                         [&b, &k] {
                           return std::vector<Tensor>{
                               b.ops.moe_experts(k.x, k.top_index, k.top_weights, k.gate_up_proj, k.down_proj)};
                         },
                         {k.x, k.top_weights, k.gate_up_proj, k.down_proj}, {k.upstream});
        });
      });
}

}  // namespace

void register_moe_benchmarks(const Suite& suite) {
  for (const Geometry& g : suite.geometries) {
    if (!g.config.enable_moe_block || !g.measures(kOp)) continue;
    for (int64_t S : g.seq_lens) {
      for (bool backward : {false, true}) {
        for (const impl::Backend& b : suite.backends) register_case(b, g, S, backward);
      }
    }
  }
}

}  // namespace gemma4::bench
