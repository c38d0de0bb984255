// The op-level bugs: each replaces one op of reference_layer_ops() with a wrong one. The golden
// check must catch the wrong numbers; finite_grads the missing weight gradient; determinism the
// run-dependent one.
#include <ATen/ATen.h>

#include <atomic>
#include <cmath>

#include "impl/faulty/faulty_backends.h"

namespace gemma4::impl {

std::vector<Backend> faulty_op_backends() {
  std::vector<Backend> out;

  // A sliding layer routed through a kernel that has no window (GEMMA4.md, Known failure modes):
  // its mask is the full layer's, so query i sees every key j <= i.
  Backend no_window = faulty_backend(
      "faulty-no-window",
      "sliding layers attend without their window: the kernel ignores window_size (GEMMA4.md, Known failure modes)",
      {Category::kGolden, Category::kOpSweep});
  no_window.ops.attention = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const AttentionSpec& spec) {
    AttentionSpec windowless = spec;
    windowless.type = LayerType::kFull;
    return reference_layer_ops().attention(q, k, v, windowless);
  };
  out.push_back(std::move(no_window));

  // The window converted off by one (FlashAttention's window_size = (sliding_window - 1, 0) taken
  // as sliding_window): query i sees keys i - window .. i, one key too many (GEMMA4.md, Layer types).
  Backend off_by_one = faulty_backend("faulty-window-off-by-one",
                                      "sliding window one too wide: query i sees keys i - sliding_window .. i "
                                      "(GEMMA4.md, Layer types and per-layer geometry)",
      {Category::kGolden, Category::kOpSweep});
  off_by_one.ops.attention = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const AttentionSpec& spec) {
    AttentionSpec wider = spec;
    wider.sliding_window += 1;
    return reference_layer_ops().attention(q, k, v, wider);
  };
  below_resolution_at_real_size(off_by_one);  // one key more among 512 or 1024: passes bf16 there
  out.push_back(std::move(off_by_one));

  // The window read off a KV-cache group that holds both layer types instead of off the layer
  // (vllm-project/vllm #51756: FlashAttention applied the group spec's window to every layer of the
  // group), so the global layers mask as if they were sliding: query i sees keys i - window + 1 .. i,
  // and loses everything older. The same kernel ran prefill and decode, so both paths carry it.
  Backend global_window = faulty_backend(
      "faulty-global-window",
      "global layers attend through the sliding window: the kernel took the window from a KV-cache group holding "
      "both layer types, not from the layer (vllm-project/vllm #51756)",
      {Category::kGolden, Category::kOpSweep, Category::kDecode});
  global_window.ops.attention = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const AttentionSpec& spec) {
    AttentionSpec windowed = spec;
    windowed.type = LayerType::kSliding;
    return reference_layer_ops().attention(q, k, v, windowed);
  };
  global_window.kv_cache = reference_kv_cache_ops();
  global_window.kv_cache.attention = [](const torch::Tensor& q, const LayerKvCache& cache,
                                        const DecodeAttentionSpec& spec) {
    DecodeAttentionSpec windowed = spec;
    windowed.type = LayerType::kSliding;
    return reference_kv_cache_ops().attention(q, cache, windowed);
  };
  out.push_back(std::move(global_window));

  // Gemma 2/3's RMSNorm carried over: the weight is applied as 1 + w (GEMMA4.md, notation: Gemma-4
  // applies w). Norms without a weight (v_norm, the router's) are unaffected.
  Backend one_plus_w = faulty_backend(
      "faulty-one-plus-w-norm", "RMSNorm scales by (1 + w) as Gemma 2/3 did instead of w (GEMMA4.md, notation of rms)",
      {Category::kGolden});
  one_plus_w.ops.rms_norm = [](const torch::Tensor& x, const torch::Tensor& weight, double eps) {
    return rms_norm(x, weight.defined() ? weight + 1 : weight, eps);
  };
  out.push_back(std::move(one_plus_w));

  // A global layer (head dim 512) routed through a kernel limited to head dim 256 that does not
  // refuse it: the scores use only the first 256 dims of q and k; the values keep all their dims.
  // Zeroing the dims the kernel never reads keeps the shapes of the reference path.
  Backend head_dim_256 = faulty_backend(
      "faulty-head-dim-256-kernel",
      "global layers (head dim > 256) go through a kernel limited to head dim 256: scores use only the first 256 dims "
      "of q and k (GEMMA4.md, Known failure modes)",
      {Category::kGolden});
  head_dim_256.ops.attention = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const AttentionSpec& spec) {
    constexpr int64_t kKernelHeadDim = 256;
    const int64_t d = q.size(-1);
    if (d <= kKernelHeadDim) return reference_layer_ops().attention(q, k, v, spec);
    auto first_dims = [&](const torch::Tensor& t) {
      return at::constant_pad_nd(t.narrow(-1, 0, kKernelHeadDim), {0, d - kKernelHeadDim});
    };
    return reference_layer_ops().attention(first_dims(q), first_dims(k), v, spec);
  };
  out.push_back(std::move(head_dim_256));

  // A fused RMSNorm kernel whose backward has no weight-gradient path: the forward is right, but
  // every norm scale silently stops training (GEMMA4.md: the fused RMSNorm + RoPE kernels).
  Backend no_weight_grad = faulty_backend(
      "faulty-norm-no-weight-grad",
      "RMSNorm kernel without a weight gradient: right forward, norm scales get zero gradient (fused RMSNorm kernels)",
      {Category::kFiniteGrads});
  no_weight_grad.ops.rms_norm = [](const torch::Tensor& x, const torch::Tensor& weight, double eps) {
    return rms_norm(x, weight.defined() ? weight.detach() : weight, eps);
  };
  out.push_back(std::move(no_weight_grad));

  // A kernel that accumulates with atomics (FlashAttention's backward does, for dq) while the
  // backend claims determinism: the order of the additions, and with it the last bits, change from
  // run to run. Simulated by moving every other call's output by 2^-20 of itself (a few fp32
  // rounding steps; bf16 and f16 round it away) and, through the same term, the gradient it passes
  // back, so that dQ, dK and dV of that call move too.
  Backend atomics = faulty_backend(
      "faulty-nondeterministic-attention",
      "attention accumulates in a run-dependent order (atomics) but the backend claims determinism: identical runs "
      "differ in the last bits of the output and of dQ, dK, dV",
      {Category::kDeterminism}, /*below_reduced_precision=*/true);
  atomics.ops.attention = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const AttentionSpec& spec) {
    static std::atomic<int64_t> calls{0};
    const torch::Tensor out = reference_layer_ops().attention(q, k, v, spec);
    return calls++ % 2 == 0 ? out : out + out * std::ldexp(1.0, -20);
  };
  out.push_back(std::move(atomics));

  return out;
}

}  // namespace gemma4::impl
