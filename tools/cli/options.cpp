// Option values shared by the subcommands (declared in commands.h).
#include <torch/cuda.h>

#include <optional>

#include "conformance/check.h"
#include "conformance/engine.h"

#include "reference/error.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {

torch::ScalarType parse_dtype(const std::string& name) {
  if (name == "f32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "f16") return torch::kFloat16;
  throw UsageError{"--dtype must be f32, bf16 or f16, got '" + name + "'"};
}

torch::Device parse_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  if (name == "cuda") {
    if (!torch::cuda::is_available()) {
      throw Error("--device cuda: no CUDA device is available to this LibTorch");
    }
    return torch::Device(torch::kCUDA, 0);
  }
  throw UsageError{"--device must be cpu or cuda, got '" + name + "'"};
}


conformance::EngineOptions engine_options(const Args& args, const Invocation& invocation, const std::string& dtypes,
                                          int jobs) {
  conformance::EngineOptions o;
  o.devices.clear();
  for (const std::string& d : split_commas(args.get("device", "cpu"))) o.devices.push_back(parse_device(d));
  o.dtypes.clear();
  const std::string dtype_list = args.get("dtype", dtypes);
  for (const std::string& d : split_commas(dtype_list == "all" ? "f32,bf16,f16" : dtype_list)) o.dtypes.push_back(parse_dtype(d));
  if (o.devices.empty() || o.dtypes.empty()) throw UsageError{"--device and --dtype need at least one value"};
  o.isas = conformance::parse_isa_levels(args.get("isa", "native"));
  o.steps = int_option(args, "steps", 0, 1);  // 0: the category's default
  o.isolate = args.has("isolate");
  o.jobs = int_option(args, "jobs", jobs, 1);
  std::optional<double> timeout;
  try {
    timeout = std::stod(args.get("timeout", "1800"));
  } catch (const std::exception&) {
  }
  if (!timeout || *timeout <= 0) throw UsageError{"--timeout must be a positive number of seconds, got '" + args.get("timeout") + "'"};
  o.timeout = *timeout;
  o.worker = invocation.worker;
  return o;
}

std::vector<conformance::Category> category_list(const Args& args, const std::string& option) {
  std::vector<conformance::Category> out;
  for (const std::string& name : split_commas(args.get(option))) {
    const std::optional<conformance::Category> c = conformance::parse_category(name);
    if (!c) {
      std::string known;
      for (const conformance::CategoryInfo& info : conformance::categories()) known += (known.empty() ? "" : ", ") + std::string(info.name);
      throw UsageError{"--" + option + ": unknown category '" + name + "' (" + known + ")"};
    }
    out.push_back(*c);
  }
  return out;
}

}  // namespace gemma4::cli
