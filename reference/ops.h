#pragma once
// The eager primitives of the Gemma-4 decoder, each written to round exactly as transformers'
// eager path does (GEMMA4.md). Shapes: B batch, S sequence, H heads, D head dim.
#include <torch/types.h>

#include "reference/config.h"

namespace gemma4 {

// x * (mean(x^2) + eps)^-0.5 * weight, in fp32, cast back to x's dtype. An undefined weight
// means no scale (v_norm, the router's norm). The weight is w, not 1 + w (Gemma 2/3 used 1 + w).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

torch::Tensor gelu_tanh(const torch::Tensor& x);

// fp32 inverse frequencies [D/2]. proportional: the first int(factor*D/2) rotate with the full D
// as denominator, the rest are 0 (cos 1, sin 0: those dims pass through).
torch::Tensor rope_inv_freq(const RopeParameters& rope, int64_t head_dim);

struct RopeTable {
  torch::Tensor cos;  // [T, D], cat(freqs, freqs).cos() for positions 0..T-1, fp32, stored in the model dtype
  torch::Tensor sin;
  // [B, S] int64: the position (table row) of each token, as transformers' generate gives every
  // batch row its own (decoding, padded batches); undefined: position s for token s of every row.
  torch::Tensor positions;
};
// The table rows of the tokens: cos and sin [S, D] without positions, [B, S, D] with them.
RopeTable rope_rows(const RopeTable& table);
RopeTable rope_table(const RopeParameters& rope, int64_t head_dim, int64_t seq_len, torch::ScalarType dtype,
                     const torch::Device& device);

// x [B, S, H, D]: x*cos + rotate_half(x)*sin with rotate_half(x) = cat(-x[D/2:], x[:D/2]), cos
// and sin the tokens' rows (rope_rows).
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTable& table);

// What an attention op needs to know about the mask, rather than the mask itself, so that a
// fused kernel can skip tiles outside the window instead of reading an S x S mask.
struct AttentionSpec {
  LayerType type = LayerType::kSliding;
  int64_t sliding_window = 0;  // as in config.json: query i sees keys i - window + 1 .. i
  bool bidirectional = false;  // use_bidirectional_attention == "all"
  torch::Tensor padding;       // [B, S] int64, 1 token / 0 padding (applied to keys); may be undefined
  // [B, S] int64: the packed sequence each token belongs to; a query sees keys of its own sequence
  // only. Undefined: every row is one sequence (packed_sequences()).
  torch::Tensor segments;
};
AttentionSpec attention_spec(const Config& config, LayerType type, const torch::Tensor& padding,
                             const torch::Tensor& segments = {});

// Several sequences packed in one row, told by their position ids as transformers tells them
// (masking_utils.find_packed_sequence_indices): a sequence starts wherever a position is not the
// previous one + 1. transformers looks for packing only when no attention mask is given, so a row
// with padding is one sequence. [B, S] int64 sequence numbers, or undefined when every row is one
// sequence (also when position_ids is undefined).
torch::Tensor packed_sequences(const torch::Tensor& position_ids, const torch::Tensor& attention_mask);

// torch.finfo(dtype).min: what transformers' eager masks add where attention is forbidden.
double lowest_value(torch::ScalarType dtype);

// Additive mask [B, 1, S, S] in `dtype`: 0 where query i may see key j, the dtype's lowest value
// elsewhere (as transformers' eager masks do, so fully padded rows stay finite). The padding
// applies to keys.
torch::Tensor attention_mask(const AttentionSpec& spec, int64_t batch, int64_t seq_len, torch::ScalarType dtype,
                             const torch::Device& device);
torch::Tensor attention_mask(const Config& config, LayerType type, int64_t batch, int64_t seq_len,
                             const torch::Tensor& padding, torch::ScalarType dtype, const torch::Device& device);
// The same for queries at token indices `query_index` and keys at `key_index` (int64 vectors; the
// padding, if any, is [B, |key_index|]): what a step of decoding against a cache needs.
torch::Tensor index_attention_mask(const AttentionSpec& spec, const torch::Tensor& query_index,
                                   const torch::Tensor& key_index, int64_t batch, torch::ScalarType dtype);

// Eager softmax attention with scale 1.0 (q and k are RMS-normalised instead), softmax in fp32.
// q [B, S, Hq, D], k and v [B, Hkv, S, D]; each kv head serves Hq/Hkv query heads.
// Returns [B, S, Hq*D].
torch::Tensor eager_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& mask);

// HF's causal-LM loss: cross-entropy of logits[:, :-1] against labels[:, 1:], ignore index -100,
// mean over counted tokens, in fp32.
torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels);

}  // namespace gemma4
