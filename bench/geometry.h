#pragma once
// The model geometries the benchmarks run at, and the benchmark naming scheme.
#include <torch/types.h>

#include <string>
#include <vector>

#include "reference/config.h"

namespace gemma4::bench {

struct Geometry {
  std::string name;  // "31b", "26b-a4b", "e2b", "e4b", "tiny", "tiny-e2b", "tiny-26b-a4b"
  Config config;
  torch::Device device;
  torch::ScalarType dtype;
  std::vector<int64_t> seq_lens;              // of the op and single-layer benchmarks
  std::vector<int64_t> layer_group_seq_lens;  // of layer_group; empty: not measured
  std::vector<std::string> ops;               // the ops measured here; empty: every op the config has

  bool measures(const std::string& op) const;
  int64_t element_bytes() const { return static_cast<int64_t>(c10::elementSize(dtype)); }
};

// The released configs 31b, 26b-a4b, e2b and e4b on CUDA in bf16, fp16 and fp32 (S 1k..32k;
// layer_group: 31b at 8k and 32k). The miniatures, on the CPU in fp32 and on CUDA in all three
// dtypes (S 64, 256): tiny, the golden 31B miniature (hidden 32, head dims 8/16, window 4) with the
// first six layers of the 31B pattern, every op and layer_group; tiny-e2b and tiny-26b-a4b, the
// golden E2B and 26B-A4B miniatures, only for what the 31B one lacks (layer_kv_shared;
// moe_experts and layer_moe). Configs come from golden::released_configs_dir(); throws
// gemma4::Error when they cannot be read.
std::vector<Geometry> geometries();

// The first layer of `type` in the config that computes its own K/V.
const LayerSpec& layer_of_type(const Config& config, LayerType type);

// "bf16", "fp16", "fp32"
std::string dtype_name(torch::ScalarType dtype);

// op/backend/device/geometry/S/dtype/direction, e.g. sliding_attention/cuda/cuda/31b/8192/bf16/fwd
// (direction: fwd, or fwdbwd for forward + backward).
std::string benchmark_name(const std::string& op, const std::string& backend, const Geometry& geometry, int64_t seq_len,
                           bool backward);

}  // namespace gemma4::bench
