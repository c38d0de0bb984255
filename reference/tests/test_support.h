#pragma once
// Small configs and helpers shared by the reference tests.
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <cstdlib>
#include <string>

#include "reference/config.h"

namespace gemma4::test {

// The source tree: this header's path less reference/tests/ (the compiler is given absolute paths),
// so that the test programs need no macro of their own (test_reference owns the shared
// precompiled header, which a macro on its target would make unusable for the others).
inline std::string source_dir() {
  const std::string header = __FILE__;
  return header.substr(0, header.rfind("/reference/tests/"));
}
// The released models' text configs (reference/configs).
inline std::string released_configs_dir() { return source_dir() + "/reference/configs"; }
inline std::string transformers_cases_dir() { return source_dir() + "/golden/transformers"; }

// E2B-like in miniature: PLE, KV sharing (layers 3..6 borrow from 1 and 2), double-wide MLP, MQA.
inline nlohmann::json tiny_shared_kv_config() {
  return {
      {"model_type", "gemma4_text"},
      {"vocab_size", 64},
      {"hidden_size", 32},
      {"intermediate_size", 48},
      {"num_hidden_layers", 7},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 1},
      {"head_dim", 8},
      {"global_head_dim", 16},
      {"sliding_window", 4},
      {"layer_types",
       {"sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
        "sliding_attention", "full_attention"}},
      {"num_kv_shared_layers", 4},
      {"hidden_size_per_layer_input", 8},
      {"vocab_size_per_layer_input", 64},
      {"use_double_wide_mlp", true},
      {"final_logit_softcapping", 30.0},
      {"tie_word_embeddings", true},
  };
}

// 26B-A4B-like in miniature: MoE on every layer, K=V global layers, untied LM head, no PLE.
inline nlohmann::json tiny_moe_config() {
  return {
      {"model_type", "gemma4_text"},
      {"vocab_size", 64},
      {"hidden_size", 32},
      {"intermediate_size", 24},
      {"num_hidden_layers", 3},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"num_global_key_value_heads", 1},
      {"head_dim", 8},
      {"global_head_dim", 16},
      {"attention_k_eq_v", true},
      {"sliding_window", 4},
      {"layer_types", {"sliding_attention", "full_attention", "full_attention"}},
      {"hidden_size_per_layer_input", 0},
      {"enable_moe_block", true},
      {"num_experts", 4},
      {"top_k_experts", 2},
      {"moe_intermediate_size", 8},
      {"tie_word_embeddings", false},
  };
}

inline torch::Tensor random_ids(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(vocab, {batch, seq}, torch::kInt64);
}

// Seeded fp32 values uniform in [-half_width, half_width).
inline torch::Tensor uniform(std::vector<int64_t> shape, uint64_t seed, double half_width = 1.0) {
  torch::manual_seed(seed);
  return (torch::rand(shape) * 2 - 1) * half_width;
}

// Cosine similarity of two tensors as flat fp64 vectors; 1 when both are zero.
inline double cosine(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.to(torch::kFloat64).flatten(), y = b.to(torch::kFloat64).flatten();
  const double nx = x.norm().item<double>(), ny = y.norm().item<double>();
  if (nx == 0 && ny == 0) return 1.0;
  return (x.dot(y) / (nx * ny)).item<double>();
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace gemma4::test
