#include "impl/variants/variant_backends.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "impl/variants/fp8_kv_cache.h"
#include "reference/checkpoint.h"
#include "reference/ops.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

Backend variant(std::string name, std::string description) {
  Backend b;
  b.name = std::move(name);
  b.description = std::move(description);
  b.kind = BackendKind::kVariant;
  b.ops = reference_layer_ops();
  return b;
}

// kv head j serves query heads j*group .. (j+1)*group-1 (transformers' repeat_kv): [B, Hkv, S, D]
// -> [B, Hq, S, D].
Tensor repeat_kv(const Tensor& t, int64_t q_heads) {
  return t.repeat_interleave(q_heads / t.size(1), /*dim=*/1);
}

// Where query i may see key j, [B, 1, S, S] bool: the reference's one mask definition
// (reference/ops.cpp attention_mask), read as "allowed".
Tensor allowed_keys(const AttentionSpec& spec, const Tensor& q) {
  return attention_mask(spec, q.size(0), q.size(1), torch::kFloat32, q.device()) == 0;
}

// ---- attention ----

// PyTorch's own scaled_dot_product_attention with its own dispatch (flash, efficient, cuDNN or
// math on CUDA; the CPU flash kernel or math on CPU). Plain causal full layers go through
// is_causal so that the flash kernels are eligible; everything else passes a boolean mask. Query
// rows that see no key come back as 0, not as the eager path's average (GEMMA4.md: both correct).
// Each attention variant is a core that takes the mask as `allowed` [B or 1, 1, S_q, S_k] bool, so
// that the same computation serves the full forward (a square mask from the spec) and decoding (the
// step's queries against the reference's cache, decode_through).
Tensor sdpa_core(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& allowed) {
  const int64_t B = q.size(0), S = q.size(1), Hq = q.size(2), D = q.size(3);
  const Tensor out = at::scaled_dot_product_attention(q.transpose(1, 2), repeat_kv(k, Hq), repeat_kv(v, Hq), allowed,
                                                      0.0, false, /*scale=*/1.0);
  return out.transpose(1, 2).reshape({B, S, Hq * D});
}

Tensor sdpa_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  const bool plain_causal =
      spec.type == LayerType::kFull && !spec.bidirectional && !spec.padding.defined() && !spec.segments.defined();
  if (!plain_causal) return sdpa_core(q, k, v, allowed_keys(spec, q));
  const int64_t B = q.size(0), S = q.size(1), Hq = q.size(2), D = q.size(3);
  const Tensor out = at::scaled_dot_product_attention(q.transpose(1, 2), repeat_kv(k, Hq), repeat_kv(v, Hq), {}, 0.0,
                                                      /*is_causal=*/true, /*scale=*/1.0);
  return out.transpose(1, 2).reshape({B, S, Hq * D});
}

// The additive mask of the reference's eager attention from `allowed`: 0, or the dtype's lowest.
Tensor additive(const Tensor& allowed, torch::ScalarType dtype) {
  const auto opts = allowed.options().dtype(dtype);
  return at::where(allowed, at::zeros({}, opts), at::full({}, lowest_value(dtype), opts));
}

// Attention computed wholly in fp32 from the rounded inputs, rounded once at the end (what a
// kernel that keeps its probabilities in fp32 returns).
Tensor fp32_core(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& allowed) {
  const auto f32 = [](const Tensor& t) { return t.to(torch::kFloat32); };
  return eager_attention(f32(q), f32(k), f32(v), additive(allowed, torch::kFloat32)).to(q.scalar_type());
}

// FlashAttention-2's online softmax over blocks of keys: scores in fp32 (fp32 accumulation of the
// rounded inputs), a running row maximum and sum, the probabilities rounded to the input dtype
// before the P.V product (as FlashAttention feeds its second GEMM), one division and one rounding
// at the end. A row that sees no key keeps a zero sum and returns 0.
// Blocks of 16 keys, or 8 blocks in all on long rows: each block's step keeps a [B, Hq, S, D]
// accumulator for autograd, and 128 of them at S = 2049 would not fit a CPU's memory.
Tensor online_softmax_core(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& allowed) {
  const int64_t B = q.size(0), S = q.size(1), Hq = q.size(2), D = q.size(3), keys = k.size(2);
  const int64_t kBlock = std::max<int64_t>(16, (keys + 7) / 8);
  const torch::ScalarType dtype = q.scalar_type();
  const Tensor qt = q.transpose(1, 2).to(torch::kFloat32);  // [B, Hq, S, D]
  const Tensor kr = repeat_kv(k, Hq).to(torch::kFloat32), vr = repeat_kv(v, Hq);
  const auto f32 = q.options().dtype(torch::kFloat32);
  Tensor row_max = at::full({B, Hq, S, 1}, -std::numeric_limits<float>::infinity(), f32);
  Tensor row_sum = at::zeros({B, Hq, S, 1}, f32);
  Tensor acc = at::zeros({B, Hq, S, D}, f32);
  for (int64_t start = 0; start < keys; start += kBlock) {
    const int64_t n = std::min(kBlock, keys - start);
    const Tensor seen = allowed.narrow(3, start, n);
    const Tensor scores = at::matmul(qt, kr.narrow(2, start, n).transpose(2, 3));
    const Tensor block_max = at::where(seen, scores, -std::numeric_limits<float>::infinity()).amax(-1, true);
    // The running maximum only keeps exp() in range; like FlashAttention, it is not differentiated.
    const Tensor new_max = at::maximum(row_max, block_max).detach();
    // exp(-inf - -inf) would be NaN: rows that have seen nothing yet use a finite stand-in.
    const Tensor safe_max = at::where(at::isinf(new_max), at::zeros_like(new_max), new_max);
    // exp of -inf, not where(seen, exp(.), 0): an unseen key's score may overflow exp, and its
    // zero gradient times inf would be NaN in backward.
    const Tensor p = at::exp(at::where(seen, scores - safe_max, -std::numeric_limits<float>::infinity()));
    const Tensor rescale = at::exp(at::where(at::isinf(row_max), safe_max - 1e30, row_max) - safe_max);
    row_sum = row_sum * rescale + p.sum(-1, true);
    acc = acc * rescale + at::matmul(p.to(dtype).to(torch::kFloat32), vr.narrow(2, start, n).to(torch::kFloat32));
    row_max = new_max;
  }
  const Tensor out = at::where(row_sum > 0, acc / row_sum.clamp_min(std::numeric_limits<float>::min()), 0.0);
  return out.to(dtype).transpose(1, 2).reshape({B, S, Hq * D});
}

// The reference's eager attention, one head at a time: other GEMM shapes, so other blockings and
// summation orders inside the BLAS.
Tensor per_head_core(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& allowed) {
  const int64_t Hq = q.size(2), group = Hq / k.size(1);
  const Tensor mask = additive(allowed, q.scalar_type());
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < Hq; ++h) {
    heads.push_back(eager_attention(q.narrow(2, h, 1), k.narrow(1, h / group, 1), v.narrow(1, h / group, 1), mask));
  }
  return at::cat(heads, -1);
}

using AttentionCore = Tensor (*)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& allowed);

// A core as the full forward's attention op: the square mask of the spec.
template <AttentionCore core>
Tensor square(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  return core(q, k, v, allowed_keys(spec, q));
}

// The online softmax as the full forward's attention op, checkpointed like FlashAttention's
// forward: nothing of the block loop is kept, and backward recomputes it (one layer's loop at a time).
Tensor online_softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  const Tensor allowed = allowed_keys(spec, q);
  const CheckpointedFn fn = [allowed](const std::vector<Tensor>& t) {
    return std::vector<Tensor>{online_softmax_core(t[0], t[1], t[2], allowed)};
  };
  return checkpoint(fn, {q, k, v}, {})[0];
}

// A core as the decode attention: the step's queries against the reference's contiguous cache.
template <AttentionCore core>
KvCacheOps decode_through() {
  KvCacheOps ops = reference_kv_cache_ops();
  ops.attention = [](const Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
    const CacheContents held = reference_kv_cache_ops().contents(cache);
    const Tensor allowed =
        decode_attention_mask(spec, q.size(1), held.first, held.k.size(2), torch::kFloat32, q.device()) == 0;
    return core(q, held.k, held.v, allowed);
  };
  return ops;
}

// ---- norms ----

// PyTorch's own at::rms_norm (its fused kernel where it has one).
Tensor aten_rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return at::rms_norm(x, {x.size(-1)}, weight.defined() ? std::optional<Tensor>(weight) : std::nullopt, eps);
}

// Llama's RMSNorm rounding: the normalised x is rounded to the input dtype and then multiplied by
// the weight in that dtype (two roundings where the reference has one).
Tensor llama_rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const Tensor x32 = x.to(torch::kFloat32);
  const Tensor normed = (x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps)).to(x.scalar_type());
  return weight.defined() ? weight.to(x.scalar_type()) * normed : normed;
}

// ---- fused single-rounding kernels ----

// q/k RMSNorm + RoPE (+ the v norm) in fp32 with one rounding per output, as a fused kernel
// computes it; the RoPE table is read as given and widened.
QkvOutputs fused_qk_norm_rope(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                              const Tensor& k_norm, const RopeTable& rope, double eps) {
  const torch::ScalarType dtype = q.scalar_type();
  const RopeTable rope32{rope.cos.to(torch::kFloat32), rope.sin.to(torch::kFloat32), rope.positions};
  auto norm_rope = [&](const Tensor& x, const Tensor& w) {
    return apply_rope(rms_norm(x.to(torch::kFloat32), w.to(torch::kFloat32), eps), rope32);
  };
  const Tensor q_out = norm_rope(q, q_norm).to(dtype);
  if (!k.defined()) return {q_out, Tensor(), Tensor()};
  const Tensor v_raw = v.defined() ? v : k;
  return {q_out, norm_rope(k, k_norm).to(dtype).transpose(1, 2),
          rms_norm(v_raw.to(torch::kFloat32), Tensor(), eps).to(dtype).transpose(1, 2)};
}

// gelu_tanh(gate) * up in fp32, rounded once.
Tensor fused_geglu(const Tensor& gate, const Tensor& up) {
  return (gelu_tanh(gate.to(torch::kFloat32)) * up.to(torch::kFloat32)).to(gate.scalar_type());
}

// The routed experts with their weighted sum accumulated in fp32 and rounded once (the reference
// adds each expert's share in the model dtype, as transformers does).
Tensor fp32_accumulate_moe_experts(const Tensor& x, const Tensor& top_index, const Tensor& top_weights,
                                   const Tensor& gate_up_proj, const Tensor& down_proj) {
  const int64_t num_experts = gate_up_proj.size(0), I = down_proj.size(2);
  Tensor out = at::zeros(x.sizes(), x.options().dtype(torch::kFloat32));
  for (int64_t e = 0; e < num_experts; ++e) {
    const auto where = at::where(top_index == e);  // (token, k) pairs routed to expert e
    if (where[0].numel() == 0) continue;
    const Tensor& token = where[0];
    const Tensor gate_up = at::linear(x.index_select(0, token), gate_up_proj[e]);
    const Tensor h = at::linear(gelu_tanh(gate_up.slice(-1, 0, I)) * gate_up.slice(-1, I), down_proj[e]);
    out = out.index_add(0, token, h.to(torch::kFloat32) * top_weights.index({token, where[1]}).unsqueeze(-1));
  }
  return out.to(x.scalar_type());
}

}  // namespace

std::vector<Backend> variant_backends() {
  std::vector<Backend> out;

  Backend sdpa = variant("variant-sdpa",
                         "attention through at::scaled_dot_product_attention with PyTorch's own dispatch (is_causal for "
                         "plain causal layers, a boolean mask otherwise; rows that see no key return 0)");
  sdpa.ops.attention = sdpa_attention;
  sdpa.kv_cache = decode_through<sdpa_core>();
  // SDPA's CUDA backward kernels may accumulate with atomics: no claim of determinism.
  sdpa.capabilities.deterministic = false;
  out.push_back(std::move(sdpa));

  Backend fp32 = variant("variant-fp32-attention", "attention computed wholly in fp32 and rounded once");
  fp32.ops.attention = square<fp32_core>;
  fp32.kv_cache = decode_through<fp32_core>();
  out.push_back(std::move(fp32));

  Backend online = variant("variant-online-softmax",
                           "FlashAttention-style online softmax over 16-key blocks (8 blocks on long rows), recomputed in "
                           "backward: fp32 scores, probabilities rounded "
                           "to the dtype before P.V, one division at the end");
  online.ops.attention = online_softmax_attention;
  online.kv_cache = decode_through<online_softmax_core>();
  out.push_back(std::move(online));

  Backend per_head = variant("variant-per-head-attention", "the eager attention one query head at a time (other GEMM shapes)");
  per_head.ops.attention = square<per_head_core>;
  per_head.kv_cache = decode_through<per_head_core>();
  out.push_back(std::move(per_head));

  Backend aten_norm = variant("variant-aten-rms-norm", "RMSNorm through PyTorch's at::rms_norm");
  aten_norm.ops.rms_norm = aten_rms_norm;
  out.push_back(std::move(aten_norm));

  Backend llama_norm = variant("variant-llama-norm-rounding",
                               "RMSNorm rounded as Llama's: normalised x rounded to the dtype, then times the weight");
  llama_norm.ops.rms_norm = llama_rms_norm;
  out.push_back(std::move(llama_norm));

  Backend fused_rope = variant("variant-fused-qk-norm-rope",
                               "q/k norm + RoPE and the v norm in fp32 with one rounding per output (a fused kernel)");
  fused_rope.ops.qk_norm_rope = fused_qk_norm_rope;
  out.push_back(std::move(fused_rope));

  Backend geglu = variant("variant-fused-geglu", "GeGLU in fp32 with one rounding (a fused kernel)");
  geglu.ops.geglu = fused_geglu;
  out.push_back(std::move(geglu));

  Backend moe = variant("variant-moe-fp32-accumulate", "MoE experts' weighted sum accumulated in fp32, rounded once");
  moe.ops.moe_experts = fp32_accumulate_moe_experts;
  out.push_back(std::move(moe));

  Backend paged = variant("variant-paged-kv-cache",
                          "decoding through a paged KV cache (pages of 4 tokens from a shared pool, sliding layers "
                          "give pages back) with a split-K attention: per-page fp32 softmax partials combined once");
  paged.kv_cache = paged_kv_cache_ops();
  out.push_back(std::move(paged));

  // fp8 KV caches (fp8_kv_cache.cpp): judged against the reference's cache quantized the same way,
  // and never in another candidate's family (their quantization error is not rounding).
  for (const auto& [q, what] :
       {std::pair{KvQuantization::kFp8PerTensor, "one static scale per layer for K and one for V (the first update's)"},
        {KvQuantization::kFp8PerHead, "static scales per layer and KV head (the first update's)"},
        {KvQuantization::kFp8PerToken, "a scale per entry and KV head, kept in the ring beside its codes"}}) {
    Backend fp8 = variant(std::string("variant-") + kv_quantization_name(q) + "-kv-cache",
                          std::string("decoding through an fp8 e4m3 KV cache, ") + what +
                              ", every layer in a ring, attention on the codes in fp32");
    fp8.kv_cache = fp8_kv_cache_ops(q);
    out.push_back(std::move(fp8));
  }

  return out;
}

}  // namespace gemma4::impl
