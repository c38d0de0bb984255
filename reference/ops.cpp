#include "reference/ops.h"

#include <ATen/ATen.h>

#include <limits>

namespace gemma4 {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const torch::Tensor x32 = x.to(torch::kFloat32);
  // pow(ms, -0.5) rather than rsqrt: transformers does the same, and the two round differently.
  torch::Tensor out = x32 * at::pow(x32.pow(2).mean(-1, /*keepdim=*/true) + eps, -0.5);
  if (weight.defined()) out = out * weight.to(torch::kFloat32);
  return out.to(x.scalar_type());
}

torch::Tensor gelu_tanh(const torch::Tensor& x) { return at::gelu(x, "tanh"); }

torch::Tensor rope_inv_freq(const RopeParameters& rope, int64_t head_dim) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  if (rope.rope_type == "default") {
    return 1.0 / at::pow(rope.theta, at::arange(0, head_dim, 2, f32) / static_cast<double>(head_dim));
  }
  // proportional (GEMMA4.md, Forward 3): the denominator is the full head dim.
  const int64_t rotated = static_cast<int64_t>(rope.partial_rotary_factor * head_dim / 2);
  torch::Tensor inv_freq = 1.0 / at::pow(rope.theta, at::arange(0, 2 * rotated, 2, f32) / static_cast<double>(head_dim));
  inv_freq = at::cat({inv_freq, at::zeros({head_dim / 2 - rotated}, f32)});
  return inv_freq / rope.factor;
}

RopeTable rope_table(const RopeParameters& rope, int64_t head_dim, int64_t seq_len, torch::ScalarType dtype,
                     const torch::Device& device) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  const torch::Tensor inv_freq = rope_inv_freq(rope, head_dim).to(device);
  // Positions are 0..S-1 for every row, padded or not, as transformers uses without position_ids.
  const torch::Tensor freqs = at::outer(at::arange(seq_len, f32), inv_freq);
  const torch::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

namespace {
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}
}  // namespace

RopeTable rope_rows(const RopeTable& table) {
  if (!table.positions.defined()) return table;
  const torch::Tensor rows = table.positions.to(table.cos.device());
  return {table.cos.index({rows}), table.sin.index({rows}), torch::Tensor()};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTable& table) {
  // [S, D] or [B, S, D] broadcast over the heads (and batch) of x [B, S, H, D].
  const RopeTable rows = rope_rows(table);
  const torch::Tensor cos = rows.cos.unsqueeze(-2);
  const torch::Tensor sin = rows.sin.unsqueeze(-2);
  return x * cos + rotate_half(x) * sin;
}

double lowest_value(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat64: return std::numeric_limits<double>::lowest();
    case torch::kFloat32: return std::numeric_limits<float>::lowest();
    case torch::kBFloat16: return static_cast<float>(std::numeric_limits<c10::BFloat16>::lowest());
    case torch::kFloat16: return static_cast<float>(std::numeric_limits<c10::Half>::lowest());
    default: TORCH_CHECK(false, "attention_mask: unsupported dtype ", dtype);
  }
}

AttentionSpec attention_spec(const Config& config, LayerType type, const torch::Tensor& padding,
                             const torch::Tensor& segments) {
  return {type, config.sliding_window, config.bidirectional, padding, segments};
}

torch::Tensor packed_sequences(const torch::Tensor& position_ids, const torch::Tensor& attention_mask) {
  if (!position_ids.defined() || position_ids.size(1) < 2) return {};
  const torch::Tensor starts = position_ids.slice(1, 1).ne(position_ids.slice(1, 0, -1) + 1);
  torch::Tensor segments = at::cat({at::zeros_like(starts.slice(1, 0, 1)), starts}, 1).to(torch::kInt64).cumsum(1);
  if (attention_mask.defined()) {  // a padded row is one sequence
    const torch::Tensor padded = attention_mask.eq(0).any(1, /*keepdim=*/true).to(segments.device());
    segments = segments.masked_fill(padded, 0);
  }
  if (!segments.ne(0).any().item<bool>()) return {};
  return segments;
}

torch::Tensor attention_mask(const Config& config, LayerType type, int64_t batch, int64_t seq_len,
                             const torch::Tensor& padding, torch::ScalarType dtype, const torch::Device& device) {
  return attention_mask(attention_spec(config, type, padding), batch, seq_len, dtype, device);
}

torch::Tensor attention_mask(const AttentionSpec& spec, int64_t batch, int64_t seq_len, torch::ScalarType dtype,
                             const torch::Device& device) {
  const torch::Tensor index = at::arange(seq_len, torch::TensorOptions().dtype(torch::kInt64).device(device));
  return index_attention_mask(spec, index, index, batch, dtype);
}

torch::Tensor index_attention_mask(const AttentionSpec& spec, const torch::Tensor& query_index,
                                   const torch::Tensor& key_index, int64_t batch, torch::ScalarType dtype) {
  const torch::Device device = query_index.device();
  const int64_t queries = query_index.size(0), keys = key_index.size(0);
  const torch::Tensor i = query_index.unsqueeze(1);  // query
  const torch::Tensor j = key_index.unsqueeze(0);    // key
  torch::Tensor allowed;
  if (spec.type == LayerType::kSliding) {
    if (spec.bidirectional) {
      allowed = (i - j).abs() <= spec.sliding_window / 2 + 1;
    } else {
      allowed = (j <= i) & (i - j < spec.sliding_window);
    }
  } else {
    allowed = spec.bidirectional ? at::ones({queries, keys}, i.options().dtype(torch::kBool)) : (j <= i);
  }
  allowed = allowed.view({1, 1, queries, keys}).expand({batch, 1, queries, keys});
  const torch::Tensor& padding = spec.padding;
  if (padding.defined()) allowed = allowed & padding.to(device).to(torch::kBool).view({batch, 1, 1, keys});
  if (spec.segments.defined()) {  // packed rows: a query sees its own sequence's keys only
    const torch::Tensor s = spec.segments.to(device);
    allowed = allowed & s.index_select(1, query_index).view({batch, 1, queries, 1})
                            .eq(s.index_select(1, key_index).view({batch, 1, 1, keys}));
  }
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  return at::where(allowed, at::zeros({}, opts), at::full({}, lowest_value(dtype), opts));
}

torch::Tensor eager_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& mask) {
  const int64_t batch = q.size(0), seq = q.size(1), q_heads = q.size(2), head_dim = q.size(3);
  const int64_t kv_heads = k.size(1), kv_seq = k.size(2);
  const int64_t group = q_heads / kv_heads;
  // repeat_kv: kv head j serves query heads j*group .. (j+1)*group-1.
  auto repeat = [&](const torch::Tensor& t) {
    return t.unsqueeze(2).expand({batch, kv_heads, group, kv_seq, head_dim}).reshape({batch, q_heads, kv_seq, head_dim});
  };
  const torch::Tensor qt = q.transpose(1, 2);
  torch::Tensor scores = at::matmul(qt, repeat(k).transpose(2, 3));
  if (mask.defined()) scores = scores + mask;
  const torch::Tensor probs = at::softmax(scores, -1, torch::kFloat32).to(q.scalar_type());
  return at::matmul(probs, repeat(v)).transpose(1, 2).reshape({batch, seq, q_heads * head_dim});
}

torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  const int64_t vocab = logits.size(-1);
  const torch::Tensor shifted_logits = logits.slice(1, 0, -1).to(torch::kFloat32).reshape({-1, vocab});
  const torch::Tensor shifted_labels = labels.slice(1, 1).reshape({-1}).to(logits.device());
  return at::cross_entropy_loss(shifted_logits, shifted_labels, /*weight=*/{}, at::Reduction::Mean,
                                /*ignore_index=*/-100);
}

}  // namespace gemma4
