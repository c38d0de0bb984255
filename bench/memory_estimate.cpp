#include "bench/memory_estimate.h"

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

double layer_group_bytes(const Config& c, int first, int count, int64_t seq_len, int64_t element_bytes,
                         bool dense_scores) {
  const double s = static_cast<double>(seq_len), e = static_cast<double>(element_bytes);
  const int64_t H = c.hidden_size, Hq = c.num_attention_heads;
  double params = 0, saved = 0;
  for (int l = first; l < first + count; ++l) {
    const LayerSpec& spec = c.layers[l];
    LayerWeights shapes_only;
    for (const WeightSlot& slot : layer_weight_slots(c, l, shapes_only)) {
      double n = 1;
      for (int64_t d : slot.shape) n *= static_cast<double>(d);
      params += n;
    }
    // What autograd must keep per token at least: the matmul inputs (two normed hiddens, the
    // attention output, the GeGLU output), the residual, q, k, v, gate and up.
    const int64_t D = spec.head_dim, Hkv = spec.num_kv_heads, I = spec.mlp_intermediate;
    saved += s * e * static_cast<double>(3 * H + 2 * Hq * D + 2 * Hkv * D + 3 * I);
    if (dense_scores) saved += square(seq_len) * Hq * kSavedScoreBytes;
  }
  double bytes = 2 * params * e + saved + 3 * s * H * e;  // weights and their grads; hidden, upstream, grad
  if (dense_scores) bytes += square(seq_len) * (Hq * kTransientScoreBytes + kMaskBytes);  // one layer's transients
  return bytes;
}

}  // namespace gemma4::bench
