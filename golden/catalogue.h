#pragma once
// The golden case catalogue: every case the reference can generate, and the recomputation that
// verification compares a file against.
#include <torch/types.h>

#include <string>
#include <vector>

#include "golden/baseline.h"
#include "golden/golden_file.h"
#include "golden/op_cases.h"
#include "reference/model.h"

namespace gemma4::golden {

struct CatalogueEntry {
  std::string name;  // "op/rms_norm-scale", "model/e2b", "real/31b-full"
  std::string kind;  // "op", "model", "layer"
  std::string summary;
  bool tiny;         // committed and verified on CPU in CI; the others are generated on a GPU
};

// Tiny cases first (ops, then models), then the real-geometry layers.
std::vector<CatalogueEntry> catalogue();

struct GenerateOptions {
  torch::ScalarType dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  uint64_t seed = 0;
  std::string generator;    // "reference <git sha>"
  std::string configs_dir;  // released configs, for model and layer cases
  // bf16/f16: the legitimate implementations whose errors form the baseline (FORMAT.md); the
  // file's own expected/ is always the first member.
  std::vector<FamilyMember> family;
};

// The weights a model case runs with, in `dtype` on `device`: its weights/ group, its seeded
// (generated or constructed) weights, or its checkpoint's.
ModelWeights model_weights(const GoldenCase& golden, torch::ScalarType dtype, const torch::Device& device);

// Computes a case from scratch: seeded inputs and weights rounded to the dtype, expected/ in the
// dtype, judged/ where some positions are don't-care and, for bf16/f16, truth/ in float32 on the
// same rounded values and baseline/ from the family. Throws gemma4::Error on an unknown name.
GoldenCase generate_case(const std::string& name, const GenerateOptions& options);
// The same for an op case that is not in the catalogue (op_sweep's), named "op/<case name>".
GoldenCase generate_op_case(const OpCase& op_case, const GenerateOptions& options);

// Recomputes what `golden` says it expects, in the file's dtype on `device`, from the file's own
// inputs, weights (or seed) and upstream gradients. Returns the same dataset names as
// golden.expected. `backend` supplies the ops (and, for model cases, the KV hand-off) to recompute
// with, the reference's when unset; its kv_key is replaced by the file's.
TensorMap recompute(const GoldenCase& golden, const torch::Device& device, const ForwardOptions& backend = {});

// File name of a case inside an output directory: "op/rms_norm-scale" -> "op/rms_norm-scale.bf16.h5".
std::string golden_file_name(const std::string& case_name, torch::ScalarType dtype);

}  // namespace gemma4::golden
