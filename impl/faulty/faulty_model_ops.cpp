// Bugs of the steps around the layer ops (reference/layer_ops.h, the second half of LayerOps) and
// of how a port masks and reduces: each changes exactly one thing and names the public report it
// reproduces (issue "Real-size conformance", item 5).
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <limits>
#include <vector>

#include "impl/faulty/faulty_backends.h"
#include "reference/ops.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The additive mask with -inf where the reference puts the dtype's lowest value, as a port that
// masks with -inf (or a boolean SDPA mask) does: a query that sees no key at all (a left-padding
// position) gets softmax(-inf, ..., -inf) = NaN, and the NaN reaches the real tokens of its row
// through the next layers' 0 * NaN in P.V (the pad position's K/V are masked, but not zero).
Tensor minus_infinity(const Tensor& mask) {
  return mask.masked_fill(mask < 0, -std::numeric_limits<double>::infinity());
}

Tensor nan_on_no_key_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  return eager_attention(q, k, v, minus_infinity(attention_mask(spec, q.size(0), q.size(1), q.scalar_type(), q.device())));
}

Tensor nan_on_no_key_decode_attention(const Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
  const CacheContents entries = reference_kv_cache_ops().contents(cache);
  const Tensor mask = decode_attention_mask(spec, q.size(1), entries.first, entries.k.size(2), q.scalar_type(), q.device());
  return eager_attention(q, entries.k, entries.v, minus_infinity(mask));
}

// RMSNorm whose weight gradient sum_t dy_t * xhat_t is accumulated token by token in bf16 (a
// kernel reducing its bf16 products without an fp32 accumulator): once the running sum is large,
// each token's term is below half its spacing. Over a tiny golden's few dozen tokens the error is
// near bf16's own rounding of the result; over B x S = 2050 to 4098 tokens it is not. The forward
// and the input gradient are the reference's.
struct Bf16WeightGradNorm : torch::autograd::Function<Bf16WeightGradNorm> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, double eps) {
    ctx->save_for_backward({x, weight});
    ctx->saved_data["eps"] = eps;
    return rms_norm(x, weight, eps);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const double eps = ctx->saved_data["eps"].toDouble();
    const Tensor dy = grads[0];
    Tensor dx;
    {  // the input gradient: the reference's, by autograd through a recomputation
      torch::AutoGradMode enable(true);
      const Tensor x = saved[0].detach().requires_grad_(true);
      dx = torch::autograd::grad({rms_norm(x, saved[1].detach(), eps)}, {x}, {dy})[0];
    }
    const int64_t H = saved[1].size(0);
    const Tensor terms = (dy.to(torch::kFloat32) * rms_norm(saved[0], Tensor(), eps).to(torch::kFloat32))
                             .reshape({-1, H})
                             .cpu()
                             .contiguous();
    // The running sum, rounded to bf16 after each token's term: a scalar loop on the host (the
    // same arithmetic as a tensor op per token, thousands of times faster at 4098 tokens).
    std::vector<c10::BFloat16> running(H, c10::BFloat16(0.0f));
    const float* term = terms.data_ptr<float>();
    for (int64_t t = 0; t < terms.size(0); ++t, term += H) {
      for (int64_t h = 0; h < H; ++h) running[h] = c10::BFloat16(static_cast<float>(running[h]) + term[h]);
    }
    std::vector<float> sum(running.begin(), running.end());
    return {dx, torch::from_blob(sum.data(), {H}, torch::kFloat32).clone().to(saved[1].options()), Tensor()};
  }
};

Tensor bf16_weight_grad_rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  if (!weight.defined()) return rms_norm(x, weight, eps);
  return Bf16WeightGradNorm::apply(x, weight, eps);
}

}  // namespace

std::vector<Backend> faulty_model_op_backends() {
  std::vector<Backend> out;

  Backend softcap = faulty_backend(
      "faulty-final-softcap-dropped",
      "the final logit soft-cap (30 tanh(logits / 30)) not applied (NVIDIA-NeMo/Megatron-Bridge #4610: Gemma-4 "
      "dense models; vllm-project/vllm #52173)",
      {Category::kGolden});
  softcap.ops.logit_softcap = [](const Tensor& logits, double) { return logits; };
  out.push_back(std::move(softcap));

  Backend embedding = faulty_backend(
      "faulty-embedding-scale-lost",
      "the embeddings' sqrt(width) normaliser lost (a plain embedding module in place of Gemma's scaled one; "
      "vllm-project/vllm #48010)",
      {Category::kGolden, Category::kDecode});
  embedding.ops.scaled_embedding = [](const Tensor& table, const Tensor& ids, const Tensor&, int64_t padding_idx) {
    return at::embedding(table, ids, padding_idx);
  };
  out.push_back(std::move(embedding));

  // Gemma-4 normalises the experts' sum (post_feedforward_layernorm_2), which cancels a per-token
  // factor on all top-k weights except through the norm's eps: the bug shows in f32 at every size
  // and in bf16 on the tiny goldens only (measured: real_size bf16 passes), hence below_reduced_precision.
  Backend router = faulty_backend(
      "faulty-router-not-renormalised",
      "the MoE router's top-k softmax probabilities used without renormalising them to sum 1 (pytorch/torchtitan "
      "#1448, norm_topk_prob missing; Gemma-4's norm after the experts hides it below bf16)",
      {Category::kGolden}, /*below_reduced_precision=*/true);
  router.ops.route = [](const Tensor& router_logits, int64_t top_k) {
    auto [weights, index] = at::softmax(router_logits, -1).topk(top_k, -1);
    return std::make_pair(weights, index);
  };
  out.push_back(std::move(router));

  Backend scalar = faulty_backend(
      "faulty-layer-scalar-dropped",
      "each layer's output not multiplied by its loaded layer_scalar (cloudrift-ai/emmy #371: real values 0.005 to "
      "0.92; random-init models hold 1)",
      {Category::kGolden, Category::kDecode});
  scalar.ops.scale_layer_output = [](const Tensor& h, const Tensor&) { return h; };
  out.push_back(std::move(scalar));

  Backend nan = faulty_backend(
      "faulty-no-key-row-nan",
      "masked with -inf, so a left-padding query that sees no key is NaN and poisons its row through 0 * NaN "
      "(lablup/mlxcel #163, unslothai/unsloth #9848, huggingface/transformers #32390)",
      {Category::kGolden, Category::kDecode});
  nan.ops.attention = nan_on_no_key_attention;
  nan.kv_cache = reference_kv_cache_ops();
  nan.kv_cache.attention = nan_on_no_key_decode_attention;
  out.push_back(std::move(nan));

  Backend packed = faulty_backend(
      "faulty-packed-rows-cross-attend",
      "a packed row attended as one sequence: its second sequence sees the first (packing told only without a 2D "
      "mask; huggingface/transformers #46634 on Gemma-4, axolotl-ai-cloud/axolotl #3796)",
      {Category::kRealSize});
  packed.ops.attention = [](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
    AttentionSpec one_sequence = spec;
    one_sequence.segments = Tensor();
    return reference_layer_ops().attention(q, k, v, one_sequence);
  };
  out.push_back(std::move(packed));

  Backend grad = faulty_backend(
      "faulty-norm-weight-grad-bf16",
      "RMSNorm's weight gradient summed over the tokens in bf16, without an fp32 accumulator "
      "(linkedin/Liger-Kernel #950, pytorch/helion #3595)",
      {Category::kRealSize});
  grad.ops.rms_norm = bf16_weight_grad_rms_norm;
  out.push_back(std::move(grad));
  return out;
}

}  // namespace gemma4::impl
