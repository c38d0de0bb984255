#pragma once
// Comparing a run with a second run rather than with a golden file: a training step of a model
// against another run of it (multithreaded_recompute, key_conventions), and one op against the
// reference op (op_sweep, determinism/attention_op).
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "conformance/check.h"
#include "golden/golden_file.h"
#include "golden/op_cases.h"
#include "golden/tolerance.h"
#include "reference/layer_ops.h"
#include "reference/model.h"

namespace gemma4::conformance {

// Forward and backward through `forward` (the backend's ops and hand-off) on the calling thread:
// outputs/loss, outputs/logits and grads/<weight name>.
golden::TensorMap training_step(const Config& config, const ModelWeights& weights, const golden::TensorMap& inputs,
                                const ForwardOptions& forward);
// The same with the weights widened to fp32 and the reference ops (a backend need not support
// fp32): the truth of the FlashAttention rule in bf16/f16.
golden::TensorMap fp32_training_step(const Config& config, const ModelWeights& weights, const golden::TensorMap& inputs,
                                     const ForwardOptions& forward);

// Records `candidate` against `reference` (same names): loss and logits one row each, the
// gradients one row for the worst of them plus one per failing one (at most 8). With `bitwise`,
// each tensor must be bitwise equal; otherwise the tolerance policy decides (check_fp32 in fp32;
// in bf16/f16 the FlashAttention rule with `reference` as the baseline and `truth` as the truth).
void record_comparison(Reporter& reporter, const std::string& label, const golden::TensorMap& candidate,
                       const golden::TensorMap& reference, const golden::TensorMap& truth, torch::ScalarType dtype,
                       bool bitwise);

// The tolerance policy for one tensor of a run in `dtype`: check_fp32 against `reference` in fp32; in
// bf16/f16 the FlashAttention rule, `reference` being the same-dtype baseline and `truth` the fp32
// computation on the same rounded inputs.
golden::Verdict judge(const torch::Tensor& candidate, const torch::Tensor& reference, const torch::Tensor& truth,
                      torch::ScalarType dtype, golden::Role role);
// "cosine 0.9999999, nmse 1.23e-12": the detail of a result row judged by the tolerance policy.
std::string metrics_detail(const golden::Metrics& metrics);

// ---- One op, forward and backward ----

// An op's forward: from its leaves (floating inputs that require grad; integer inputs as given) to
// named outputs, through `ops`.
using OpForward = std::function<golden::TensorMap(const golden::TensorMap& leaves, const LayerOps& ops)>;
struct OpRun {
  golden::TensorMap outputs;  // detached; an output the op leaves undefined is left out
  golden::TensorMap grads;    // of sum(output * upstream[output]) w.r.t. each floating input; undefined where
                              // no gradient reaches it
};
// Runs `forward` on fresh leaves made from `inputs` and back-propagates `upstream` (one tensor per
// differentiable output; an upstream whose output is undefined is an error).
OpRun run_op_backward(const OpForward& forward, const golden::TensorMap& inputs, const golden::TensorMap& upstream,
                      const LayerOps& ops);
// The floating tensors moved to `device` and cast to `dtype`; integer ones only moved.
golden::TensorMap to_device(const golden::TensorMap& tensors, const torch::Device& device, torch::ScalarType dtype);

// One call of the attention op (LayerOps::attention). Inputs: q [B, S, Hq, D]; k and v [B, Hkv, S, D],
// or, K=V (a global layer without v_proj), kv [B, S, Hkv, D] and k_norm [D], from which k =
// rope(rms(kv, k_norm)) (proportional RoPE) and v = rms_noscale(kv) are made with the reference's
// ops, so that grads/kv sums both paths; attention_mask [B, S] with left_padding. Output: out.
struct AttentionOpCase {
  LayerType type = LayerType::kSliding;
  int64_t window = 0;  // sliding only, as in config.json
  int64_t batch = 1, seq = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  std::vector<int64_t> left_padding;  // per batch row; empty: no padding
  bool k_eq_v = false;
  // "sliding-w23-lt-s37-h4kv2-d16-b2-pad0,5", "full-keqv-s77-h8kv1-d64-b1"
  std::string name() const;
  int64_t sliding_window() const { return type == LayerType::kSliding ? window : 0; }
};
// Seeded (counter_uniform, streams named after the case), fp32 on the CPU; upstream/out uniform in [-1, 1).
golden::OpTensors attention_op_tensors(const AttentionOpCase& c, uint64_t seed);
golden::TensorMap attention_op_forward(const AttentionOpCase& c, const golden::TensorMap& leaves, const LayerOps& ops);

// The first line of an exception's message (c10 errors without their backtrace).
std::string error_message(const std::exception_ptr& error);

}  // namespace gemma4::conformance
