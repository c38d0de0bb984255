#include "bench/geometry.h"

#include "golden/model_cases.h"

namespace gemma4::bench {
namespace {

const char* const k31bConfig = "gemma-4-31b.json";

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16: return "bf16";
    case torch::kFloat16: return "fp16";
    case torch::kFloat32: return "fp32";
    default: return c10::toString(dtype);
  }
}

}  // namespace

std::vector<Geometry> geometries() {
  const std::string dir = golden::released_configs_dir();
  const Config real = parse_config(golden::load_released_config(k31bConfig, dir));
  // Six layers: one group of the 31B pattern (five sliding, then one global).
  const golden::ModelCase tiny_case{"31b", "", k31bConfig, 6, 0};
  const Config tiny = parse_config(golden::tiny_config(tiny_case, dir));
  const std::vector<int64_t> gpu_seq_lens{1024, 4096, 8192, 16384, 32768};
  const std::vector<int64_t> tiny_seq_lens{64, 256};
  return {
      {"31b", real, torch::kCUDA, torch::kBFloat16, gpu_seq_lens, {8192, 32768}},
      {"tiny", tiny, torch::kCPU, torch::kFloat32, tiny_seq_lens, tiny_seq_lens},
      {"tiny", tiny, torch::kCUDA, torch::kBFloat16, tiny_seq_lens, tiny_seq_lens},
  };
}

const LayerSpec& layer_of_type(const Config& config, LayerType type) {
  return config.layers[golden::first_layer_of_type(config, type)];
}

std::string benchmark_name(const std::string& op, const std::string& backend, const Geometry& g, int64_t seq_len,
                           bool backward) {
  const std::string device = g.device.is_cuda() ? "cuda" : "cpu";
  return op + "/" + backend + "/" + device + "/" + g.name + "/" + std::to_string(seq_len) + "/" + dtype_name(g.dtype) +
         "/" + (backward ? "fwdbwd" : "fwd");
}

}  // namespace gemma4::bench
