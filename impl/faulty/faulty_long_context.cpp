// Bugs that only long contexts show (issue "Real-size conformance"): each is below bf16/f16's
// resolution over the tiny goldens' few dozen tokens, and grows with the number of keys or with the
// position. They declare the real_size category, where S = 2 x window + 1 (1025 or 2049 tokens).
#include <ATen/ATen.h>

#include <limits>

#include "impl/faulty/faulty_backends.h"
#include "reference/ops.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

// Softmax attention whose row sum (the softmax denominator) is accumulated key by key in bf16, as
// a kernel that keeps its running sum in the input's precision: once the sum is large, a key's
// probability is below half its spacing and adds nothing, and the denominator stalls. The scores,
// exponentials and P.V stay in fp32; only the sum is rounded after each addition (and so the bug
// exists in every dtype: an fp32 run's sum is rounded to bf16 too). It needs many keys of
// comparable weight: on the generated (random) real-size models, whose attention is nearly one-hot,
// bf16 passed it (0.39 of the bound on an H200); on the constructed ones (moderate entropy,
// FORMAT.md "Constructed weights") it fails in every dtype.
Tensor bf16_running_sum_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  const int64_t B = q.size(0), S = q.size(1), Hq = q.size(2), D = q.size(3), group = Hq / k.size(1);
  const Tensor allowed = attention_mask(spec, B, S, torch::kFloat32, q.device()) == 0;  // [B, 1, S, S]
  const Tensor qt = q.transpose(1, 2).to(torch::kFloat32);
  const Tensor kr = k.repeat_interleave(group, 1).to(torch::kFloat32), vr = v.repeat_interleave(group, 1).to(torch::kFloat32);
  const Tensor scores = at::matmul(qt, kr.transpose(2, 3)).masked_fill(~allowed, -std::numeric_limits<float>::infinity());
  const Tensor row_max = scores.amax(-1, true).detach();
  const Tensor safe_max = at::where(at::isinf(row_max), at::zeros_like(row_max), row_max);
  const Tensor p = at::exp(scores - safe_max);  // [B, Hq, S, S]; 0 where hidden
  // The running sum key by key, rounded to bf16 after each addition; its gradient is the exact
  // sum's (a kernel's accumulator has no backward of its own), which keeps autograd to one node.
  Tensor stalled;
  {
    torch::NoGradGuard no_grad;
    const Tensor columns = p.detach().permute({3, 0, 1, 2}).contiguous();  // [S keys, B, Hq, S queries]
    Tensor running = at::zeros({B, Hq, S}, p.options().dtype(torch::kBFloat16));
    for (int64_t j = 0; j < S; ++j) running = (running.to(torch::kFloat32) + columns[j]).to(torch::kBFloat16);
    stalled = running.to(torch::kFloat32).unsqueeze(-1);
  }
  const Tensor exact = p.sum(-1, true);
  const Tensor sum = exact + (stalled - exact).detach();
  const Tensor out = at::where(sum > 0, at::matmul(p, vr) / sum.clamp_min(std::numeric_limits<float>::min()), 0.0);
  return out.to(q.scalar_type()).transpose(1, 2).reshape({B, S, Hq * D});
}

// The RoPE table rebuilt from inv_freq rounded to bf16, as a model cast whole to bf16 rounds its
// inv_freq buffer (transformers #25681; from_pretrained(dtype=...) keeps it in fp32). The angle
// position x inv_freq then carries the frequency's relative error 2^-9 times the position: a few
// hundredths of a radian over the tiny goldens' 40 positions, radians at 2k. Each frequency is
// read off position 1 of the given table (atan2), so proportional RoPE's zero frequencies stay 0.
RopeTable bf16_inv_freq_table(const RopeTable& table) {
  const int64_t D = table.cos.size(-1), T = table.cos.size(0);
  if (T < 2) return table;
  const auto f32 = table.cos.options().dtype(torch::kFloat32);
  const Tensor freq = at::atan2(table.sin[1].slice(0, 0, D / 2).to(torch::kFloat32),
                                table.cos[1].slice(0, 0, D / 2).to(torch::kFloat32));
  const Tensor rounded = freq.to(torch::kBFloat16).to(torch::kFloat32);
  const Tensor angles = at::outer(at::arange(T, f32), rounded);
  const Tensor emb = at::cat({angles, angles}, -1);
  return {emb.cos().to(table.cos.scalar_type()), emb.sin().to(table.sin.scalar_type()), table.positions};
}

QkvOutputs bf16_inv_freq_qk_norm_rope(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                                      const Tensor& k_norm, const RopeTable& rope, double eps) {
  return reference_layer_ops().qk_norm_rope(q, k, v, q_norm, k_norm, bf16_inv_freq_table(rope), eps);
}

}  // namespace

std::vector<Backend> faulty_long_context_backends() {
  std::vector<Backend> out;
  Backend sum = faulty_backend(
      "faulty-softmax-sum-bf16",
      "the softmax denominator accumulated key by key in bf16: it stalls once a key's probability is below half "
      "its spacing, which only long rows reach (sonos/tract #2586, huggingface/candle #3727, pytorch/executorch #20089)",
      {Category::kRealSize});
  sum.ops.attention = bf16_running_sum_attention;
  out.push_back(std::move(sum));

  Backend rope = faulty_backend(
      "faulty-rope-inv-freq-bf16",
      "RoPE's inv_freq rounded to bf16 (a model cast whole to bf16): the angle's error grows with the position "
      "(huggingface/transformers #25681, #29285; EleutherAI/gpt-neox #1003)",
      {Category::kRealSize});
  rope.ops.qk_norm_rope = bf16_inv_freq_qk_norm_rope;
  out.push_back(std::move(rope));
  return out;
}

}  // namespace gemma4::impl
