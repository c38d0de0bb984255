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

namespace {

// Whether `op` still holds the reference's function (stored as a plain function pointer).
template <class Signature>
bool is_reference(const std::function<Signature>& op, const std::function<Signature>& reference) {
  const auto* a = op.template target<Signature*>();
  const auto* b = reference.template target<Signature*>();
  return a != nullptr && b != nullptr && *a == *b;
}

}  // namespace

std::vector<std::string> replaced_parts(const Backend& backend) {
  // A plugin links its own copy of the reference: its reference ops live at other addresses, and
  // the executable's symbols are not exported to compare names.
  if (backend.kind == BackendKind::kPlugin) return {"unknown (plugin)"};
  const LayerOps& ref = reference_layer_ops();
  const LayerOps& ops = backend.ops;
  std::vector<std::string> parts;
  if (!is_reference(ops.rms_norm, ref.rms_norm)) parts.push_back("rms_norm");
  if (!is_reference(ops.qk_norm_rope, ref.qk_norm_rope)) parts.push_back("qk_norm_rope");
  if (!is_reference(ops.attention, ref.attention)) parts.push_back("attention");
  if (!is_reference(ops.geglu, ref.geglu)) parts.push_back("geglu");
  if (!is_reference(ops.moe_experts, ref.moe_experts)) parts.push_back("moe_experts");
  if (!is_reference(ops.scaled_embedding, ref.scaled_embedding)) parts.push_back("scaled_embedding");
  if (!is_reference(ops.route, ref.route)) parts.push_back("route");
  if (!is_reference(ops.scale_layer_output, ref.scale_layer_output)) parts.push_back("scale_layer_output");
  if (!is_reference(ops.logit_softcap, ref.logit_softcap)) parts.push_back("logit_softcap");
  if (!is_reference(ops.linear, ref.linear)) parts.push_back("linear");
  if (backend.kv_handoff) parts.push_back("kv_handoff");
  if (backend.kv_cache.make) parts.push_back("kv_cache");
  return parts;
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
