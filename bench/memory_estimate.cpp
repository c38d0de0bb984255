#include "bench/memory_estimate.h"

#include <algorithm>

#include "reference/weights.h"

namespace gemma4::bench {
namespace {

// Bytes per element of a [B, Hq, S, S] score matrix in eager attention (the reference's, SDPA math):
// what one call holds at its peak (scores, masked scores, the fp32 softmax and its cast; in backward,
// their gradients), and what autograd keeps for backward (the fp32 softmax output and its cast).
constexpr double kTransientScoreBytes = 12, kSavedScoreBytes = 6;
// An [S, S] mask as the reference builds it: an int64 temporary, then the mask.
constexpr double kMaskBytes = 16;

double square(int64_t n) { return static_cast<double>(n) * static_cast<double>(n); }

}  // namespace

bool materialises_scores(const LayerOps& ops) {
  using Attention =
      torch::Tensor (*)(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const AttentionSpec&);
  const Attention* mine = ops.attention.target<Attention>();
  const Attention* eager = reference_layer_ops().attention.target<Attention>();
  return mine && eager && *mine == *eager;
}

double attention_bytes(const AttentionFootprint& f) {
  const double s = static_cast<double>(f.seq_len), e = static_cast<double>(f.element_bytes);
  const double q = s * f.q_heads * f.head_dim * e, kv = s * f.kv_heads * f.head_dim * e;
  const double io = 2 * q + 2 * kv;             // q, k, v, out
  double bytes = f.backward ? 2 * io + q : io;  // + their gradients and the upstream gradient
  if (f.dense_scores) {
    bytes += square(f.seq_len) * f.q_heads * (kTransientScoreBytes + (f.backward ? kSavedScoreBytes : 0));
  }
  if (f.mask) bytes += square(f.seq_len) * kMaskBytes;
  return bytes;
}

double memory_bound_bytes(double elements, bool backward) { return elements * (backward ? 16 : 8); }

double moe_experts_bytes(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t intermediate,
                         int64_t element_bytes, bool backward) {
  const double t = static_cast<double>(tokens), k = static_cast<double>(top_k), e = static_cast<double>(element_bytes);
  const double h = static_cast<double>(hidden), i = static_cast<double>(intermediate);
  const double weights = 3 * static_cast<double>(experts) * i * h * e, routed = t * k * (h + 3 * i) * e;
  return (backward ? 2 : 1) * (weights + routed) + t * h * e * (backward ? 4 : 2) +
         t * k * static_cast<double>(experts) * 8;
}

double layers_bytes(const Config& c, const std::vector<int>& layers, int64_t seq_len, int64_t element_bytes,
                    bool dense_scores, bool backward) {
  const double s = static_cast<double>(seq_len), e = static_cast<double>(element_bytes);
  const int64_t H = c.hidden_size, Hq = c.num_attention_heads;
  double params = 0, saved = 0, largest = 0;
  for (int l : layers) {
    const LayerSpec& spec = c.layers[l];
    LayerWeights shapes_only;
    params += slot_elements(layer_weight_slots(c, l, shapes_only));
    // What autograd must keep per token at least: the matmul inputs (two normed hiddens, the
    // attention output, the GeGLU output), the residual, q, k, v (borrowed on KV-shared layers),
    // gate and up; the PLE input and gate; the routed experts' rows.
    const int64_t D = spec.head_dim, Hkv = spec.num_kv_heads, I = spec.mlp_intermediate;
    double per_token =
        static_cast<double>(3 * H + 2 * Hq * D + 2 * Hkv * D + 3 * I + 2 * c.hidden_size_per_layer_input);
    if (c.enable_moe_block)
      per_token += static_cast<double>(c.top_k_experts * (H + 3 * c.moe_intermediate_size) + 2 * H);
    const double activations = s * e * per_token;
    saved += activations + (dense_scores ? square(seq_len) * Hq * kSavedScoreBytes : 0);
    largest = std::max(largest, activations);
  }
  double bytes =
      (backward ? 2 : 1) * params * e + (backward ? saved : largest) + 3 * s * H * e;     // + hidden, upstream, grad
  if (dense_scores) bytes += square(seq_len) * (Hq * kTransientScoreBytes + kMaskBytes);  // one layer's transients
  if (c.enable_moe_block) bytes += s * static_cast<double>(c.top_k_experts * c.num_experts) * 8;  // one-hot routing
  return bytes;
}

}  // namespace gemma4::bench
