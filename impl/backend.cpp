#include "impl/backend.h"

#include <algorithm>

#include "reference/error.h"

namespace gemma4::impl {

std::string Capabilities::unsupported(const torch::Device& device, torch::ScalarType dtype, int64_t head_dim,
                                      int64_t sliding_window) const {
  if (std::find(devices.begin(), devices.end(), device.type()) == devices.end()) {
    return "device " + c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  }
  if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end()) return std::string("dtype ") + c10::toString(dtype);
  if (head_dim > 0 && !head_dims.empty() && std::find(head_dims.begin(), head_dims.end(), head_dim) == head_dims.end()) {
    return "head dim " + std::to_string(head_dim);
  }
  if (sliding_window > 0 && max_sliding_window > 0 && sliding_window > max_sliding_window) {
    return "sliding window " + std::to_string(sliding_window);
  }
  return "";
}

const char* backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kReference: return "reference";
    case BackendKind::kFused: return "fused";
    case BackendKind::kVariant: return "variant";
    case BackendKind::kFaulty: return "faulty";
    case BackendKind::kPlugin: return "plugin";
  }
  return "?";
}

const Backend& find_backend(const std::string& name) {
  std::string known;
  for (const Backend& b : builtin_backends()) {
    if (b.name == name) return b;
    known += (known.empty() ? "" : ", ") + b.name;
  }
  throw Error("unknown backend '" + name + "' (known: " + known + "; or load one with --backend-lib)");
}

}  // namespace gemma4::impl
