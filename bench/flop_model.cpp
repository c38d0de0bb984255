#include "bench/flop_model.h"

#include <algorithm>

#include "reference/weights.h"

namespace gemma4::bench {

double causal_pairs(int64_t seq_len, int64_t window) {
  const double s = static_cast<double>(seq_len);
  const double w = static_cast<double>(window > 0 ? std::min(window, seq_len) : seq_len);
  // Rows i < w see i + 1 keys, the rest see w.
  return w * (w + 1) / 2 + (s - w) * w;
}

Work attention_work(int64_t batch, int64_t q_heads, int64_t head_dim, int64_t seq_len, int64_t window, bool backward) {
  const double forward = 4.0 * batch * q_heads * head_dim * causal_pairs(seq_len, window);
  return {backward ? 3.5 * forward : forward, 0};
}

Work memory_bound_work(double differentiable_inputs, double tables, double outputs, bool backward) {
  const double r = differentiable_inputs, t = tables, w = outputs;
  return {0, backward ? 3 * r + 2 * t + 2 * w : r + t + w};
}

Work moe_experts_work(int64_t tokens, int64_t top_k, int64_t hidden, int64_t intermediate, bool backward) {
  const double forward = 2.0 * static_cast<double>(tokens) * static_cast<double>(top_k) * 3.0 *
                         static_cast<double>(hidden) * static_cast<double>(intermediate);
  return {backward ? 3 * forward : forward, 0};
}

int64_t matmul_params(const Config& config, int layer) {
  LayerWeights shapes_only;
  int64_t params = 0;
  for (const WeightSlot& slot : layer_weight_slots(config, layer, shapes_only)) {
    if (slot.shape.size() != 2) continue;
    params += slot.shape[0] * slot.shape[1];
  }
  return params;
}

Work layers_work(const Config& config, const std::vector<int>& layers, int64_t seq_len, bool backward) {
  double attention = 0, matmul = 0;
  for (int l : layers) {
    const LayerSpec& spec = config.layers[l];
    const int64_t window = spec.type == LayerType::kSliding ? config.sliding_window : 0;
    attention += attention_work(1, config.num_attention_heads, spec.head_dim, seq_len, window, false).flop;
    matmul += 2.0 * static_cast<double>(matmul_params(config, l)) * static_cast<double>(seq_len);
    if (config.enable_moe_block) {
      matmul +=
          moe_experts_work(seq_len, config.top_k_experts, config.hidden_size, config.moe_intermediate_size, false).flop;
    }
  }
  return {backward ? 3.5 * attention + 3 * matmul : attention + matmul, 0};
}

}  // namespace gemma4::bench
