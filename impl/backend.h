#pragma once
// A backend: an implementation of the replaceable Gemma-4 ops (reference/layer_ops.h) and of the
// shared-KV hand-off (reference/kv_handoff.h), with what it supports. The conformance suite runs
// the reference decoder with a backend's ops and judges the results.
#include <torch/types.h>

#include <string>
#include <vector>

#include "impl/category.h"
#include "reference/kv_cache.h"
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

// What a backend is for. The suite judges every kind the same way; `gemma4-conform calibrate`
// expects variants to pass everything and faulty backends to fail where they say.
enum class BackendKind {
  kReference,  // the definition of right (reference/layer_ops.cpp)
  kFused,      // an optimised in-tree implementation (the cuda backend)
  kVariant,    // a correct implementation that rounds or dispatches differently: must pass
  kFaulty,     // one real bug: must fail in `fails_in`
  kPlugin,     // loaded with --backend-lib; nothing is expected of it
};
const char* backend_kind_name(BackendKind kind);  // "reference", "fused", "variant", "faulty", "plugin"

struct Backend {
  std::string name;         // "reference", "faulty-no-window", or a plugin's own
  std::string description;  // one line; a faulty backend names the bug it reproduces and its public source
  BackendKind kind = BackendKind::kPlugin;
  Capabilities capabilities;
  LayerOps ops;                // every op set (start from reference_layer_ops() and replace some)
  KvHandoffFactory kv_handoff; // unset: the reference hand-off
  // Incremental decoding: the cache update and the attention of new queries against the cache
  // (reference/kv_cache.h). Unset (no `make`): the reference's contiguous cache.
  KvCacheOps kv_cache;

  // kFaulty only. The categories in which the bug must show (at least one failing result each).
  std::vector<Category> fails_in;
  // kFaulty only. The bug moves results by less than bf16/f16 rounding, so it must fail in f32
  // and may pass in bf16 and f16 (a conformance suite cannot see below the dtype's resolution).
  bool below_reduced_precision = false;
};

// The parts a backend replaces, in LayerOps order ("rms_norm", "qk_norm_rope", "attention", "geglu",
// "moe_experts"), then "kv_handoff" and "kv_cache": an op counts as replaced unless it is the reference's own
// function. For a plugin this cannot be told (its reference ops are its own copies): one entry,
// "unknown (plugin)".
std::vector<std::string> replaced_parts(const Backend& backend);

// The in-tree backends, by name: "reference" first, then the faulty-* ones.
const std::vector<Backend>& builtin_backends();
// Throws gemma4::Error listing the known names.
const Backend& find_backend(const std::string& name);

}  // namespace gemma4::impl
