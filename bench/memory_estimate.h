#pragma once
// Rough estimates of the device memory a case needs, so that a case that cannot fit is skipped
// with a reason instead of running into an out-of-memory error (which is still caught: an
// estimate under the free memory does not promise the case fits). They count the inputs,
// outputs, gradients and weights, the [S, S] masks that are built, and, for attention that
// materialises scores, the [B, Hq, S, S] matrices, which dominate at long S: at S = 32k one fp32
// score matrix of 32 heads is 128 GiB.
#include <cstdint>
#include <vector>

#include "reference/config.h"
#include "reference/layer_ops.h"

namespace gemma4::bench {

// True when `ops` computes attention with the reference's eager kernel (scores [B, Hq, S, S]).
bool materialises_scores(const LayerOps& ops);

struct AttentionFootprint {
  int64_t q_heads, kv_heads, head_dim, seq_len, element_bytes;
  bool backward;
  bool dense_scores;  // eager attention, SDPA math
  bool mask;          // an [S, S] mask is built (the reference's, SDPA's band mask)
};
double attention_bytes(const AttentionFootprint& f);

// A memory-bound op over `elements` input and output elements in all (with fp32 temporaries).
double memory_bound_bytes(double elements, bool backward);

// LayerOps::moe_experts over `tokens` tokens routed to `top_k` of `experts` experts: the expert
// weights (and their gradients), x, out, the routed rows' intermediates, the reference's one-hot
// routing mask [T, K, E] int64.
double moe_experts_bytes(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t intermediate,
                         int64_t element_bytes, bool backward);

// The decoder layers `layers` at batch 1: weights (and their gradients), what autograd keeps per
// token (backward) or one layer's activations (forward), the borrowed K/V of KV-shared layers.
double layers_bytes(const Config& config, const std::vector<int>& layers, int64_t seq_len, int64_t element_bytes,
                    bool dense_scores, bool backward);

}  // namespace gemma4::bench
