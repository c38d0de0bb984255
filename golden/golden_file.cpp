#include "golden/golden_file.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <vector>

#ifdef GEMMA4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>
#endif

#include "golden/h5_tensors.h"
#include "reference/error.h"

namespace gemma4::golden {
namespace {

void write_group(h5::File& file, const std::string& group, const TensorMap& tensors) {
  for (const auto& [name, tensor] : tensors) file.write(group + "/" + name, tensor);
}

void read_group(const h5::File& file, const std::string& group, const std::string& prefix, TensorMap& out) {
  for (const std::string& child : file.children(group)) {
    const std::string path = group == "/" ? child : group + "/" + child;
    if (file.is_group(path)) {
      read_group(file, path, prefix + child + "/", out);
    } else {
      out[prefix + child] = file.read(path);
    }
  }
}

}  // namespace

TensorMap read_tree(const h5::File& file, const std::string& group) {
  TensorMap out;
  read_group(file, group, "", out);
  return out;
}

namespace {

TensorMap read_optional_group(const h5::File& file, const std::string& group) {
  TensorMap out;
  if (file.exists(group)) read_group(file, group, "", out);
  return out;
}

std::string required_string(const h5::File& file, const std::string& name) {
  if (!file.has_attr("/", name)) throw Error(file.path() + ": missing root attribute '" + name + "'");
  return file.attr_string("/", name);
}

void check_finite(const std::string& path, const std::string& group, const TensorMap& tensors) {
  for (const auto& [name, t] : tensors) {
    if (!t.is_floating_point() || t.numel() == 0) continue;
    if (!at::isfinite(t).all().item<bool>()) {
      throw Error(path + ": dataset '" + group + "/" + name + "' holds NaN or infinity");
    }
  }
}

}  // namespace

torch::ScalarType dtype_from_name(const std::string& name) {
  if (name == "f32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "f16") return torch::kFloat16;
  throw Error("unknown dtype '" + name + "' (expected f32, bf16 or f16)");
}

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return "f32";
    case torch::kBFloat16: return "bf16";
    case torch::kFloat16: return "f16";
    default: throw Error(std::string("no golden dtype name for ") + c10::toString(dtype));
  }
}

TensorMap to_device(const TensorMap& tensors, torch::ScalarType dtype, const torch::Device& device) {
  TensorMap out;
  for (const auto& [name, t] : tensors) out[name] = t.is_floating_point() ? t.to(device, dtype) : t.to(device);
  return out;
}

Provenance current_provenance(const std::string& generator, const torch::Device& device) {
  Provenance p{generator, TORCH_VERSION, device.is_cuda() ? "cuda" : "cpu", "", ""};
#ifdef GEMMA4_WITH_CUDA
  if (device.is_cuda()) {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    p.cuda_version = std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
    p.gpu_name = at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->name;
  }
#endif
  return p;
}

void write_golden(const std::string& path, const GoldenCase& g) {
  h5::File file = h5::File::create(path);
  file.set_attr("/", "format_version", kFormatVersion);
  file.set_attr("/", "kind", g.kind);
  file.set_attr("/", "case", g.name);
  file.set_attr("/", "description", g.description);
  file.set_attr("/", "generator", g.provenance.generator);
  file.set_attr("/", "config", g.config.dump());
  file.set_attr("/", "dtype", g.dtype);
  file.set_attr("/", "device", g.provenance.device);
  file.set_attr("/", "seed", static_cast<int64_t>(g.seed));
  file.set_attr("/", "torch_version", g.provenance.torch_version);
  if (g.provenance.device == "cuda") {
    file.set_attr("/", "cuda_version", g.provenance.cuda_version);
    file.set_attr("/", "gpu_name", g.provenance.gpu_name);
  }
  file.set_attr("/", "tolerance_class", g.tolerance_class());
  if (g.kind != "op") {
    write_weights_mode(file, g.weights_mode, g.checkpoint_as_written.empty() ? g.checkpoint : g.checkpoint_as_written);
  }
  if (!g.quantization.empty()) file.set_attr("/", "quantization", g.quantization);
  if (!g.truth_weights.empty()) file.set_attr("/", "truth_weights", g.truth_weights);
  if (g.kind == "model") file.set_attr("/", "kv_key", g.kv_key);
  if (g.kind == "layer") file.set_attr("/", "layer", g.layer);
  if (!g.truth.empty()) file.set_attr("/", "truth_dtype", std::string("f32"));

  write_group(file, "inputs", g.inputs);
  write_group(file, "weights", g.weights);
  write_group(file, "upstream", g.upstream);
  write_group(file, "expected", g.expected);
  write_group(file, "truth", g.truth);
  write_group(file, "judged", g.judged);
  if (!g.baseline_family.empty()) file.set_attr("/", "baseline_family", nlohmann::json(g.baseline_family).dump());
  write_group(file, "baseline", g.baseline);
}

GoldenCase read_golden(const std::string& path, bool need_baseline) {
  const h5::File file = h5::File::open_read(path);
  if (!file.has_attr("/", "format_version")) {
    throw Error(path + ": not a golden file (no root attribute 'format_version')");
  }
  const int64_t version = file.attr_int("/", "format_version");
  if (version != kFormatVersion) {
    throw Error(path + ": format_version " + std::to_string(version) + ", this build reads version " +
                std::to_string(kFormatVersion));
  }
  GoldenCase g;
  g.kind = required_string(file, "kind");
  if (g.kind != "model" && g.kind != "layer" && g.kind != "op") {
    throw Error(path + ": kind '" + g.kind + "' is not model, layer or op");
  }
  g.name = required_string(file, "case");
  g.description = file.has_attr("/", "description") ? file.attr_string("/", "description") : "";
  g.provenance.generator = required_string(file, "generator");
  try {
    g.config = nlohmann::json::parse(required_string(file, "config"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": root attribute 'config' is not JSON: " + e.what());
  }
  g.dtype = required_string(file, "dtype");
  dtype_from_name(g.dtype);  // validates
  g.provenance.device = required_string(file, "device");
  g.provenance.torch_version = required_string(file, "torch_version");
  if (g.provenance.device == "cuda") {
    g.provenance.cuda_version = required_string(file, "cuda_version");
    g.provenance.gpu_name = required_string(file, "gpu_name");
  }
  if (!file.has_attr("/", "seed")) throw Error(path + ": missing root attribute 'seed'");
  g.seed = static_cast<uint64_t>(file.attr_int("/", "seed"));
  if (g.kind != "op") {
    required_string(file, "weights");
    g.weights_mode = read_weights_mode(file, path, WeightsMode::kStored);
    if (g.weights_mode == WeightsMode::kCheckpoint) {
      g.checkpoint = read_checkpoint_dir(file, path);
      g.checkpoint_as_written = file.attr_string("/", "checkpoint");
    }
  }
  if (file.has_attr("/", "quantization")) g.quantization = file.attr_string("/", "quantization");
  if (file.has_attr("/", "truth_weights")) g.truth_weights = file.attr_string("/", "truth_weights");
  if (g.kind == "model") g.kv_key = required_string(file, "kv_key");
  if (g.kind == "layer") {
    if (!file.has_attr("/", "layer")) throw Error(path + ": missing root attribute 'layer'");
    g.layer = file.attr_int("/", "layer");
  }

  for (const char* group : {"inputs", "expected"}) {
    if (!file.exists(group)) throw Error(path + ": missing group '" + group + "'");
  }
  g.inputs = read_optional_group(file, "inputs");
  g.weights = read_optional_group(file, "weights");
  g.upstream = read_optional_group(file, "upstream");
  g.expected = read_optional_group(file, "expected");
  g.truth = read_optional_group(file, "truth");
  if (g.kind != "op" && g.weights_mode == WeightsMode::kStored && g.weights.empty()) throw Error(path + ": weights = stored but no 'weights' group");

  // Reduced precision is judged against the truth: the file must carry it, for every dataset.
  if (g.dtype != "f32") {
    if (g.truth.empty()) throw Error(path + ": dtype " + g.dtype + " needs a 'truth' group (FORMAT.md)");
    for (const auto& [name, t] : g.expected) {
      auto it = g.truth.find(name);
      if (it == g.truth.end()) throw Error(path + ": 'truth/" + name + "' is missing");
      if (it->second.sizes() != t.sizes()) throw Error(path + ": 'truth/" + name + "' and 'expected/" + name + "' differ in shape");
    }
  }
  g.judged = read_optional_group(file, "judged");
  for (const auto& [name, mask] : g.judged) {
    auto it = g.expected.find(name);
    if (it == g.expected.end()) throw Error(path + ": 'judged/" + name + "' names no dataset of expected/");
    if (mask.scalar_type() != torch::kInt64 || mask.dim() != it->second.dim()) {
      throw Error(path + ": 'judged/" + name + "' must be int64 of the dataset's rank " + std::to_string(it->second.dim()));
    }
    for (int64_t d = 0; d < mask.dim(); ++d) {
      if (mask.size(d) != 1 && mask.size(d) != it->second.size(d)) {
        throw Error(path + ": 'judged/" + name + "' has shape " + shape_string(mask.sizes()) +
                    ", which does not broadcast to " + shape_string(it->second.sizes()));
      }
    }
  }
  // Reduced precision: the baseline family's errors, one [M, 2] table per dataset.
  if (g.dtype != "f32" && (need_baseline || file.has_attr("/", "baseline_family"))) {
    if (!file.has_attr("/", "baseline_family")) throw Error(path + ": dtype " + g.dtype + " needs root attribute 'baseline_family'");
    try {
      g.baseline_family = nlohmann::json::parse(file.attr_string("/", "baseline_family")).get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ": root attribute 'baseline_family' is not a JSON list of names: " + e.what());
    }
    if (g.baseline_family.empty()) throw Error(path + ": 'baseline_family' is empty");
    g.baseline = read_optional_group(file, "baseline");
    const int64_t members = static_cast<int64_t>(g.baseline_family.size());
    for (const auto& [name, t] : g.expected) {
      auto it = g.baseline.find(name);
      if (it == g.baseline.end()) throw Error(path + ": 'baseline/" + name + "' is missing");
      if (it->second.dim() != 2 || it->second.size(0) != members || it->second.size(1) != 2) {
        throw Error(path + ": 'baseline/" + name + "' has shape " + shape_string(it->second.sizes()) + ", expected [" +
                    std::to_string(members) + ", 2] (one row per baseline_family member)");
      }
    }
  }
  check_finite(path, "baseline", g.baseline);
  check_finite(path, "inputs", g.inputs);
  check_finite(path, "weights", g.weights);
  check_finite(path, "upstream", g.upstream);
  check_finite(path, "expected", g.expected);
  check_finite(path, "truth", g.truth);
  return g;
}

}  // namespace gemma4::golden
