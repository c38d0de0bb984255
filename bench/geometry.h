#pragma once
// The model geometries the benchmarks run at, and the benchmark naming scheme.
#include <torch/types.h>

#include <string>
#include <vector>

#include "reference/config.h"

namespace gemma4::bench {

struct Geometry {
  std::string name;  // "31b", "tiny"
  Config config;
  torch::Device device;
  torch::ScalarType dtype;
  std::vector<int64_t> seq_lens;              // of the op benchmarks
  std::vector<int64_t> layer_group_seq_lens;  // of layer_group

  int64_t element_bytes() const { return static_cast<int64_t>(c10::elementSize(dtype)); }
};

// 31b: the released config, on CUDA in bf16. tiny: the golden 31B miniature (golden::tiny_config:
// hidden 32, head dims 8/16, window 4) with the first six layers of the 31B pattern, on the CPU in
// fp32 and on CUDA in bf16. Configs come from golden::released_configs_dir(); throws
// gemma4::Error when they cannot be read.
std::vector<Geometry> geometries();

// The first layer of `type` in the config (each has its own K/V in the benchmarked geometries).
const LayerSpec& layer_of_type(const Config& config, LayerType type);

// op/backend/device/geometry/S/dtype/direction, e.g. sliding_attention/cuda/cuda/31b/8192/bf16/fwd
// (direction: fwd, or fwdbwd for forward + backward).
std::string benchmark_name(const std::string& op, const std::string& backend, const Geometry& geometry, int64_t seq_len,
                           bool backward);

}  // namespace gemma4::bench
