#pragma once
// The ops an op case can run (golden/op_cases.h): for each, what it reads and returns as a
// function of its params, how it computes through LayerOps, and which output positions are
// don't-care. Internal to golden/: op_cases.cpp is the one runner on top of it.
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <string>
#include <vector>

#include "golden/golden_file.h"  // TensorMap
#include "reference/layer_ops.h"

namespace gemma4::golden::ops {

using Shape = std::vector<int64_t>;

// How make_op_tensors fills an input (golden/FORMAT.md, "Generated tensors").
enum class Fill { kUniform, kIds, kLeftPadding };

struct InputSpec {
  std::string name;
  Shape shape;
  Fill fill = Fill::kUniform;
  double center = 0.0, half_width = 1.0;  // kUniform
  int64_t bound = 0;                      // kIds and kLeftPadding: values lie in [0, bound)
};

struct OutputSpec {
  std::string name;
  Shape shape;
  bool differentiable = true;  // false for tables that do not depend on the inputs: no upstream
};

struct Signature {
  std::vector<InputSpec> inputs;
  std::vector<OutputSpec> outputs;
};

struct OpDef {
  const char* name;
  Signature (*signature)(const nlohmann::json& params);
  TensorMap (*forward)(const nlohmann::json& params, const TensorMap& inputs, const LayerOps& ops);
  // Output name -> 1/0 mask broadcastable to it, 0 where the value is implementation-defined
  // (golden/FORMAT.md, "Don't-care positions"); null or empty: every position is judged.
  TensorMap (*dont_care)(const nlohmann::json& params, const TensorMap& inputs);
};

// Throws gemma4::Error listing the known ops.
const OpDef& find_op(const std::string& op);
// Params errors (a missing or mistyped field) become gemma4::Error naming the op.
Signature signature_of(const std::string& op, const nlohmann::json& params);

}  // namespace gemma4::golden::ops
