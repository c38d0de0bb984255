#pragma once
// Op-level golden cases (golden/FORMAT.md, "Op cases"): each Gemma-4 op that implementations
// customise, on tiny seeded tensors, forward and backward through the reference's eager ops.
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <string>
#include <vector>

#include "golden/golden_file.h"  // TensorMap
#include "reference/layer_ops.h"

namespace gemma4::golden {

struct OpCase {
  std::string name;       // catalogue name without the "op/" prefix, e.g. "attention-sliding-gqa"
  std::string op;         // which computation: see run_op
  std::string summary;    // one line for `golden list --verbose` and the file's description
  nlohmann::json params;  // everything that is not a tensor: shapes, eps, window, rope parameters
};

// The catalogue, tiny first-class citizens of CI (each runs in well under a second on a CPU).
const std::vector<OpCase>& op_cases();
const OpCase* find_op_case(const std::string& name);  // nullptr when unknown

struct OpTensors {
  TensorMap inputs;    // what the op reads; floating ones in `dtype`, integer ones int64
  TensorMap upstream;  // one fixed upstream gradient per differentiable output, in `dtype`
};

// Seeded inputs and upstream gradients (counter_uniform / counter_integers, stream name =
// "inputs/<name>" or "upstream/<name>"), so they are recreated bit for bit anywhere.
OpTensors make_op_tensors(const OpCase& op_case, uint64_t seed, torch::ScalarType dtype, const torch::Device& device);

struct OpResult {
  TensorMap outputs;  // forward outputs by name
  TensorMap grads;    // gradient of sum(output * upstream) w.r.t. each floating input, by input name
};

// Runs `op` with `params` on `inputs` (all on one device, all floating inputs in one dtype) and
// back-propagates `upstream`. Throws gemma4::Error naming the op and the missing or mis-shaped
// tensor when the inputs do not fit.
// The replaceable ops go through `ops` (reference/layer_ops.h), so a backend's ops can be judged
// against the op goldens; RoPE tables and PLE inputs are always the reference's.
OpResult run_op(const std::string& op, const nlohmann::json& params, const TensorMap& inputs, const TensorMap& upstream,
                const LayerOps& ops = reference_layer_ops());

}  // namespace gemma4::golden
