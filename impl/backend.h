#pragma once
// A backend: an implementation of the replaceable Gemma-4 ops (reference/layer_ops.h) and of the
// shared-KV hand-off (reference/kv_handoff.h), with what it supports. The conformance suite runs
// the reference decoder with a backend's ops and judges the results.
#include <torch/types.h>

#include <string>
#include <vector>

#include "reference/kv_handoff.h"
#include "reference/layer_ops.h"

namespace gemma4::impl {

// What a backend supports; the suite reports anything else as not_supported, not as failed.
struct Capabilities {
  std::vector<torch::DeviceType> devices{torch::kCPU, torch::kCUDA};
  std::vector<torch::ScalarType> dtypes{torch::kFloat32, torch::kBFloat16, torch::kFloat16};
  std::vector<int64_t> head_dims;  // empty: any head dim
  int64_t max_sliding_window = 0;  // 0: any window
  bool deterministic = true;       // the same inputs twice give bitwise-equal outputs

  // "" when supported, else why not ("dtype Half", "head dim 512", "device cuda", "sliding window 1024").
  // head_dim and sliding_window 0: not asked.
  std::string unsupported(const torch::Device& device, torch::ScalarType dtype, int64_t head_dim = 0,
                          int64_t sliding_window = 0) const;
};

struct Backend {
  std::string name;         // "reference", "faulty-no-window", or a plugin's own
  std::string description;  // one line; a faulty backend names the bug it reproduces
  Capabilities capabilities;
  LayerOps ops;                // every op set (start from reference_layer_ops() and replace some)
  KvHandoffFactory kv_handoff; // unset: the reference hand-off
};

// The in-tree backends, by name: "reference" first, then the faulty-* ones.
const std::vector<Backend>& builtin_backends();
// Throws gemma4::Error listing the known names.
const Backend& find_backend(const std::string& name);

}  // namespace gemma4::impl
