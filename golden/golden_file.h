#pragma once
// A golden case in memory, and its HDF5 file (golden/FORMAT.md is the contract this implements).
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "golden/weights_mode.h"

namespace gemma4::h5 {
class File;
}

namespace gemma4::golden {

inline constexpr int64_t kFormatVersion = 2;  // 2: judged/ (don't-care positions), baseline/ (the family's errors)

// Dataset name relative to a group ("outputs/logits", "x") -> tensor; sorted, so files are written
// in a fixed order.
using TensorMap = std::map<std::string, torch::Tensor>;

struct Provenance {
  std::string generator;  // "reference <git sha>" or "transformers <version>"
  std::string torch_version;
  std::string device;     // "cpu" or "cuda"
  std::string cuda_version, gpu_name;  // device == "cuda" only
};

struct GoldenCase {
  std::string kind;         // "model", "layer" or "op"
  std::string name;         // catalogue name, "op/rms_norm-scale"
  std::string description;
  nlohmann::json config;    // model/layer: the text config; op: {"op": ..., parameters}
  std::string dtype;        // "f32", "bf16" or "f16"
  uint64_t seed = 0;
  Provenance provenance;
  WeightsMode weights_mode = WeightsMode::kStored;  // model and layer cases
  std::string checkpoint;  // weights = checkpoint: the Hugging Face checkpoint directory, resolved
  std::string checkpoint_as_written;  // and as the file gives it (relative to the file: rewritten so)
  // A golden made on a quantized model's dequantized weights (FORMAT.md, "Quantized subjects"): root
  // attributes 'quantization' (the type, "Q8_0", "mlx-4bit", ...) and 'truth_weights' ("exact");
  // empty for any other golden.
  std::string quantization, truth_weights;
  std::string kv_key;        // model: "layer-type" or "layer-index"
  int64_t layer = -1;        // layer: the layer of `config` that was run

  TensorMap inputs, weights, upstream;
  TensorMap expected;  // "outputs/<name>" and "grads/<name>"
  TensorMap truth;     // same names, float32; only for bf16/f16
  // Where a dataset of expected/ is judged: int64, 1 judged, 0 don't-care (implementation-defined;
  // only required to be finite), broadcastable to the dataset. A dataset without one is judged
  // everywhere (FORMAT.md, "Don't-care positions").
  TensorMap judged;
  // bf16/f16 only: per dataset of expected/, float32 [M, 2]: row m holds the max-abs and RMS error
  // against truth/ of the baseline family's member baseline_family[m] (FORMAT.md, "Tolerance policy").
  TensorMap baseline;
  std::vector<std::string> baseline_family;  // "expected" (this file's expected/) first, then implementations

  std::string tolerance_class() const { return dtype == "f32" ? "fp32" : "reduced-precision"; }
};

// Floating tensors cast to `dtype` and moved to `device`; integer ones only moved.
TensorMap to_device(const TensorMap& tensors, torch::ScalarType dtype, const torch::Device& device);

// Every dataset under `group` of an open file ("/" for the whole file), by its path relative to
// the group; nested groups become slash-separated names.
TensorMap read_tree(const h5::File& file, const std::string& group);

// Writes every tensor as float32 (floating) or int64, truncating an existing file.
void write_golden(const std::string& path, const GoldenCase& golden);

// Reads and checks a file: throws gemma4::Error naming the file and the problem (not HDF5, damaged
// or truncated, wrong format_version, missing attribute or group, truth/ not matching expected/,
// NaN or infinity in a dataset).
// `need_baseline` false: a bf16/f16 file without baseline/ is accepted (golden baseline fills it in).
GoldenCase read_golden(const std::string& path, bool need_baseline = true);

torch::ScalarType dtype_from_name(const std::string& name);  // f32 | bf16 | f16
std::string dtype_name(torch::ScalarType dtype);

// The torch version, and the CUDA version and GPU name when `device` is CUDA.
Provenance current_provenance(const std::string& generator, const torch::Device& device);

}  // namespace gemma4::golden
