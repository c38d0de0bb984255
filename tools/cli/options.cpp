// Option values shared by the subcommands (declared in commands.h).
#include <torch/cuda.h>

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

}  // namespace gemma4::cli
