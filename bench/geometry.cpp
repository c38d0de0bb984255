#include "bench/geometry.h"

#include <algorithm>

#include "golden/model_cases.h"
#include "reference/error.h"

namespace gemma4::bench {
namespace {

const torch::ScalarType kDtypes[] = {torch::kBFloat16, torch::kFloat16, torch::kFloat32};

const golden::ModelCase& model_case(const std::string& name) {
  for (const golden::ModelCase& mc : golden::model_cases()) {
    if (mc.name == name) return mc;
  }
  throw Error("no golden model case '" + name + "'");
}

}  // namespace

bool Geometry::measures(const std::string& op) const {
  return ops.empty() || std::find(ops.begin(), ops.end(), op) != ops.end();
}

std::vector<Geometry> geometries() {
  const std::string dir = golden::released_configs_dir();
  const std::vector<int64_t> gpu_seq_lens{1024, 4096, 8192, 16384, 32768};
  const std::vector<int64_t> tiny_seq_lens{64, 256};
  std::vector<Geometry> out;
  for (const golden::ReleasedModel& r : golden::released_models()) {
    const Config config = parse_config(golden::load_released_config(r.file, dir));
    // layer_group: the 31B pattern only, at 8k and 32k.
    const std::vector<int64_t> group = r.name == "31b" ? std::vector<int64_t>{8192, 32768} : std::vector<int64_t>{};
    for (torch::ScalarType dtype : kDtypes) {
      out.push_back({r.name, config, torch::kCUDA, dtype, gpu_seq_lens, group, {}});
    }
  }
  struct Tiny {
    const char* name;
    golden::ModelCase model_case;
    std::vector<std::string> ops;
  };
  // Six layers: one group of the 31B pattern (five sliding, then one global).
  const Tiny tiny[] = {{"tiny", {"31b", "", "gemma-4-31b.json", 6, 0}, {}},
                       {"tiny-e2b", model_case("e2b"), {"layer_kv_shared"}},
                       {"tiny-26b-a4b", model_case("26b-a4b"), {"moe_experts", "layer_moe"}}};
  for (const Tiny& t : tiny) {
    const Config config = parse_config(golden::tiny_config(t.model_case, dir));
    const std::vector<int64_t> group = t.ops.empty() ? tiny_seq_lens : std::vector<int64_t>{};
    out.push_back({t.name, config, torch::kCPU, torch::kFloat32, tiny_seq_lens, group, t.ops});
    for (torch::ScalarType dtype : kDtypes)
      out.push_back({t.name, config, torch::kCUDA, dtype, tiny_seq_lens, group, t.ops});
  }
  return out;
}

const LayerSpec& layer_of_type(const Config& config, LayerType type) {
  return config.layers[golden::first_layer_of_type(config, type)];
}

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16:
      return "bf16";
    case torch::kFloat16:
      return "fp16";
    case torch::kFloat32:
      return "fp32";
    default:
      return c10::toString(dtype);
  }
}

std::string benchmark_name(const std::string& op, const std::string& backend, const Geometry& g, int64_t seq_len,
                           bool backward) {
  const std::string device = g.device.is_cuda() ? "cuda" : "cpu";
  return op + "/" + backend + "/" + device + "/" + g.name + "/" + std::to_string(seq_len) + "/" + dtype_name(g.dtype) +
         "/" + (backward ? "fwdbwd" : "fwd");
}

}  // namespace gemma4::bench
