// Numeric bug classes reported publicly against Gemma and other LLM ports. Each replaces one op of
// reference_layer_ops() with a wrong one that reproduces the reported bug, and names its source in
// its description; everything else stays the reference's.
#include <ATen/ATen.h>

#include <cmath>

#include "impl/faulty/faulty_backends.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

const LayerOps& ref() { return reference_layer_ops(); }

// ---- RoPE as the buggy ports apply it ----

// Pairs (2i, 2i+1) rotated by frequency i (GPT-J's layout) where Gemma pairs (i, i + D/2)
// (rotate_half). The table is Gemma's cat(freqs, freqs), so frequency i is column i.
Tensor rope_interleaved(const Tensor& x, const RopeTable& table) {
  const int64_t half = x.size(-1) / 2;
  const RopeTable rows = rope_rows(table);
  const Tensor cos = rows.cos.slice(-1, 0, half).unsqueeze(-2), sin = rows.sin.slice(-1, 0, half).unsqueeze(-2);
  const Tensor pairs = x.unflatten(-1, {half, 2});
  const Tensor even = pairs.select(-1, 0), odd = pairs.select(-1, 1);
  return at::stack({even * cos - odd * sin, odd * cos + even * sin}, -1).flatten(-2);
}

// How many leading frequency columns of a table rotate: D/2 for default RoPE, int(factor * D / 2)
// for proportional RoPE, whose remaining columns have frequency 0 (sin identically 0).
int64_t rotating_pairs(const RopeTable& table) {
  const int64_t half = table.sin.size(-1) / 2;
  return table.sin.slice(-1, 0, half).ne(0).any(0).sum().item<int64_t>();
}

// Proportional RoPE whose rotated block is treated as a small rotary head of its own: pairs
// (i, i + a) within the first 2a dims, the rest passed through, instead of (i, i + D/2) across the
// whole head with zero frequencies padded. Default RoPE (a = D/2) is the same either way.
Tensor rope_unpadded_pairs(const Tensor& x, const RopeTable& table) {
  const int64_t a = rotating_pairs(table), D = x.size(-1);
  if (2 * a == D) return apply_rope(x, table);
  const RopeTable rows = rope_rows(table);
  const Tensor cos = rows.cos.slice(-1, 0, a).unsqueeze(-2), sin = rows.sin.slice(-1, 0, a).unsqueeze(-2);
  const Tensor x1 = x.slice(-1, 0, a), x2 = x.slice(-1, a, 2 * a);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin, x.slice(-1, 2 * a)}, -1);
}

// The proportional table rebuilt with inv_freq[i] = theta^(-2i / R), R = 2a the rotated width,
// instead of theta^(-2i / D): since theta^(-2i/R) = (theta^(-2i/D))^(D/R), each frequency is
// read off position 1 of the given table and raised to D/R. Default RoPE (R = D) is unchanged.
RopeTable rotary_denominator_table(const RopeTable& table) {
  const int64_t a = rotating_pairs(table), D = table.cos.size(-1), S = table.cos.size(0);
  if (2 * a == D || S < 2) return table;
  const auto f32 = table.cos.options().dtype(torch::kFloat32);
  const Tensor freq = at::atan2(table.sin[1].slice(0, 0, a).to(torch::kFloat32), table.cos[1].slice(0, 0, a).to(torch::kFloat32));
  const Tensor wrong = at::cat({freq.pow(static_cast<double>(D) / (2.0 * a)), at::zeros({D / 2 - a}, f32)});
  const Tensor angles = at::outer(at::arange(S, f32), wrong);
  const Tensor emb = at::cat({angles, angles}, -1);
  return {emb.cos().to(table.cos.scalar_type()), emb.sin().to(table.sin.scalar_type()), table.positions};
}

// The q/k norm + RoPE of layer_ops.cpp with `rope` swapped for a port's rotation.
template <typename Rope>
QkvOutputs norm_then(Rope rope, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                     const Tensor& k_norm, const RopeTable& table, double eps) {
  const Tensor q_out = rope(rms_norm(q, q_norm, eps), table);
  if (!k.defined()) return {q_out, Tensor(), Tensor()};
  const Tensor v_raw = v.defined() ? v : k;
  return {q_out, rope(rms_norm(k, k_norm, eps), table).transpose(1, 2), rms_norm(v_raw, Tensor(), eps).transpose(1, 2)};
}

// ---- attention ----

// Eager attention whose scores are soft-capped as Gemma 2's were (cap * tanh(s / cap)).
Tensor softcapped_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  constexpr double kGemma2AttentionSoftcap = 50.0;
  const int64_t B = q.size(0), S = q.size(1), Hq = q.size(2), D = q.size(3);
  const Tensor kr = k.repeat_interleave(Hq / k.size(1), 1), vr = v.repeat_interleave(Hq / v.size(1), 1);
  Tensor scores = at::matmul(q.transpose(1, 2), kr.transpose(2, 3));
  scores = at::tanh(scores / kGemma2AttentionSoftcap) * kGemma2AttentionSoftcap;
  scores = scores + attention_mask(spec, B, S, q.scalar_type(), q.device());
  const Tensor probs = at::softmax(scores, -1, torch::kFloat32).to(q.scalar_type());
  return at::matmul(probs, vr).transpose(1, 2).reshape({B, S, Hq * D});
}

}  // namespace

std::vector<Backend> faulty_numeric_backends() {
  std::vector<Backend> out;
  const std::vector<Category> golden_and_sweep = {Category::kGolden, Category::kOpSweep};

  Backend scale = faulty_backend(
      "faulty-attention-scale",
      "attention scores scaled by head_dim^-0.5; Gemma-4 uses 1.0 because q and k are RMS-normalised "
      "(https://github.com/zzhhjjj/gemma-triton-flash-attn/issues/6)",
      golden_and_sweep);
  scale.ops.attention = [](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
    return ref().attention(q * std::pow(static_cast<double>(q.size(-1)), -0.5), k, v, spec);
  };
  out.push_back(std::move(scale));

  // The two GELUs differ by at most about 5e-4 (at |x| near 2): below bf16 and f16 resolution in
  // most tensors, far above fp32's.
  Backend gelu = faulty_backend(
      "faulty-gelu-exact",
      "GeGLU with the exact erf GELU instead of the tanh approximation (gelu_pytorch_tanh) "
      "(https://github.com/huggingface/transformers/pull/29402, https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/4661)",
      golden_and_sweep, /*below_reduced_precision=*/true);
  gelu.ops.geglu = [](const Tensor& gate, const Tensor& up) { return at::gelu(gate, "none") * up; };
  out.push_back(std::move(gelu));

  Backend interleaved = faulty_backend(
      "faulty-rope-interleaved",
      "q/k RoPE on GPT-J interleaved pairs (2i, 2i+1) instead of rotate_half pairs (i, i + D/2) "
      "(https://github.com/ohdearquant/lattice/issues/392, https://github.com/NeuraLegion/shainet/pull/111)",
      golden_and_sweep);
  interleaved.ops.qk_norm_rope = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qn, const Tensor& kn,
                                    const RopeTable& t, double eps) { return norm_then(rope_interleaved, q, k, v, qn, kn, t, eps); };
  out.push_back(std::move(interleaved));

  Backend denominator = faulty_backend(
      "faulty-proportional-rope-rotary-denominator",
      "global layers' proportional RoPE with inv_freq = theta^(-2i / rotary_dim) instead of theta^(-2i / head_dim) "
      "(https://github.com/pegainfer-project/pegainfer/issues/820)",
      golden_and_sweep);
  denominator.ops.qk_norm_rope = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qn, const Tensor& kn,
                                    const RopeTable& t, double eps) {
    return ref().qk_norm_rope(q, k, v, qn, kn, rotary_denominator_table(t), eps);
  };
  out.push_back(std::move(denominator));

  Backend unpadded = faulty_backend(
      "faulty-proportional-rope-unpadded-pairs",
      "proportional RoPE rotating pairs (i, i + a) inside its rotated block instead of (i, i + D/2) with zero "
      "frequencies padded (https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/4195)",
      golden_and_sweep);
  unpadded.ops.qk_norm_rope = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qn, const Tensor& kn,
                                 const RopeTable& t, double eps) { return norm_then(rope_unpadded_pairs, q, k, v, qn, kn, t, eps); };
  out.push_back(std::move(unpadded));

  Backend tiled = faulty_backend(
      "faulty-gqa-tiled-kv-heads",
      "grouped-query attention with kv heads tiled (query head h reads kv head h % Hkv) instead of repeated "
      "(h / (Hq / Hkv)) (https://github.com/ekzhang/jax-js/pull/180, https://github.com/onnx/onnx/pull/7274)",
      golden_and_sweep);
  tiled.ops.attention = [](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
    const int64_t group = q.size(2) / k.size(1);
    return ref().attention(q, k.repeat({1, group, 1, 1}), v.repeat({1, group, 1, 1}), spec);
  };
  out.push_back(std::move(tiled));

  Backend no_padding = faulty_backend(
      "faulty-padding-ignored",
      "the key padding mask is dropped: real tokens of a left-padded row attend to padding "
      "(https://github.com/ml-explore/mlx-lm/issues/1906, https://github.com/unslothai/unsloth/issues/1066)",
      golden_and_sweep);
  no_padding.ops.attention = [](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
    AttentionSpec unpadded = spec;
    unpadded.padding = Tensor();
    return ref().attention(q, k, v, unpadded);
  };
  out.push_back(std::move(no_padding));

  Backend narrow = faulty_backend(
      "faulty-window-too-narrow",
      "sliding window one key too narrow: query i sees keys i - sliding_window + 2 .. i; the +-1 between "
      "window conventions (https://github.com/huggingface/transformers/issues/29623, "
      "https://github.com/vllm-project/vllm/issues/3385)",
      golden_and_sweep);
  narrow.ops.attention = [](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
    AttentionSpec narrower = spec;
    narrower.sliding_window -= 1;
    return ref().attention(q, k, v, narrower);
  };
  below_resolution_at_real_size(narrow);  // one key fewer among 512 or 1024: passes bf16 there
  out.push_back(std::move(narrow));

  Backend swapped = faulty_backend(
      "faulty-moe-gate-up-swapped",
      "MoE experts read the fused gate_up_proj [E, 2I, H] up-half first, so GELU gates the up projection "
      "(https://github.com/thinking-machines-lab/tinker-cookbook/pull/459)",
      {Category::kGolden});
  swapped.ops.moe_experts = [](const Tensor& x, const Tensor& index, const Tensor& weights, const Tensor& gate_up,
                               const Tensor& down) {
    const int64_t I = gate_up.size(1) / 2;
    return ref().moe_experts(x, index, weights, at::cat({gate_up.slice(1, I), gate_up.slice(1, 0, I)}, 1), down);
  };
  out.push_back(std::move(swapped));

  // Gemma 2 soft-capped its attention scores at 50; Gemma 3 and 4 do not. A kernel shared between
  // generations that keeps the cap moves scores of size s by about s^3 / 7500: subtle on small scores.
  Backend softcap = faulty_backend(
      "faulty-attention-softcap",
      "attention scores soft-capped at 50 as Gemma 2's were; Gemma 4 has no attention softcap "
      "(https://github.com/vllm-project/vllm-metal/issues/665: the softcap wired wrong between Gemma generations)",
      golden_and_sweep);
  softcap.ops.attention = softcapped_attention;
  out.push_back(std::move(softcap));

  return out;
}

}  // namespace gemma4::impl
