#pragma once
// Op cases: one Gemma-4 op that implementations customise, on small seeded tensors, forward and
// backward. One type and one runner serve the committed op goldens (golden/FORMAT.md, "Op cases"),
// the conformance suite's op_sweep and its determinism checks: a case is a name, an op and its
// params, and everything else (tensors, don't-care positions, the computation) follows from them.
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <string>
#include <vector>

#include "golden/golden_file.h"  // TensorMap
#include "reference/layer_ops.h"

namespace gemma4::golden {

struct OpCase {
  std::string name;       // e.g. "attention-sliding-gqa" (catalogue) or "sliding-w23-lt-s37-h4kv2-d16-b2" (sweep)
  std::string op;         // rms_norm, rope, qk_norm_rope, attention, geglu, mlp, moe, ple_inputs, ple_branch
  std::string summary;    // one line for `golden list --verbose` and the file's description
  nlohmann::json params;  // everything that is not a tensor: shapes, eps, window, rope parameters
};

// The committed catalogue, tiny first-class citizens of CI (each runs in well under a second on a CPU).
const std::vector<OpCase>& op_cases();
const OpCase* find_op_case(const std::string& name);  // nullptr when unknown

// Builders of the generated cases (op_sweep, determinism), named after their geometry.
struct AttentionGeometry {
  LayerType type = LayerType::kSliding;
  int64_t window = 0;  // sliding only, as in config.json
  int64_t batch = 1, seq = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  std::vector<int64_t> left_padding;  // per batch row; empty: no padding
  bool k_eq_v = false;                // global K=V: kv + k_norm inputs, proportional RoPE inside
};
// "sliding-w23-lt-s37-h4kv2-d16-b2-pad0,5", "full-keqv-s77-h8kv1-d64-b1"
OpCase attention_case(const AttentionGeometry& g);
struct QkNormRopeGeometry {
  bool proportional = false, k_eq_v = false, kv_shared = false;
  int64_t batch = 1, seq = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  // The op gets its norm weights in fp32 (the run dtype's values, converted): the weights of mixed
  // precision training, which a fused kernel may read through its own fp32 path.
  bool fp32_norm_weights = false;
};
// "default-s37-h4kv2-d16-b2", "proportional-keqv-...", "default-kv-shared-s37-h4-d16-b2"; "-wf32"
// appended with fp32_norm_weights
OpCase qk_norm_rope_case(const QkNormRopeGeometry& g);
OpCase geglu_case(int64_t batch, int64_t seq, int64_t intermediate);  // "b2-s37-i48"

struct OpTensors {
  TensorMap inputs;    // what the op reads; floating ones in `dtype`, integer ones int64
  TensorMap upstream;  // one fixed upstream gradient per differentiable output, in `dtype`; zero at
                       // don't-care positions, so that no judged gradient depends on them
};

// Seeded inputs and upstream gradients (counter_uniform / counter_integers, stream name =
// "inputs/<name>" or "upstream/<name>"), so they are recreated bit for bit anywhere.
OpTensors make_op_tensors(const OpCase& op_case, uint64_t seed, torch::ScalarType dtype, const torch::Device& device);

// "outputs/<name>" -> int64 1/0 mask broadcastable to the output, 0 where the value is
// implementation-defined (an attention row that sees no key). Outputs without one are judged everywhere.
TensorMap op_judged(const std::string& op, const nlohmann::json& params, const TensorMap& inputs);

struct OpResult {
  TensorMap outputs;  // forward outputs by name
  TensorMap grads;    // gradient of sum(output * upstream) w.r.t. each floating input, by input name
};

// Runs `op` with `params` on `inputs` (all on one device, all floating inputs in one dtype) and
// back-propagates `upstream`. Throws gemma4::Error naming the op and the missing or mis-shaped
// tensor when the inputs do not fit. The replaceable ops go through `ops` (reference/layer_ops.h),
// so a backend's ops are judged exactly as the reference's are; RoPE tables, K=V key paths and PLE
// inputs are always the reference's.
OpResult run_op(const std::string& op, const nlohmann::json& params, const TensorMap& inputs, const TensorMap& upstream,
                const LayerOps& ops = reference_layer_ops());

}  // namespace gemma4::golden
