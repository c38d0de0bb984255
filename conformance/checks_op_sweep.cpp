// op_sweep: the backend's attention, qk_norm_rope and geglu ops (LayerOps) against the reference's
// (reference_layer_ops()) on a table of small seeded random cases, forward output and gradients
// (a fixed seeded upstream gradient; grads of every floating input). The golden category exercises
// the ops only through a few tiny committed cases; this one covers the geometry a fused kernel gets
// wrong: sliding windows smaller than, equal to and larger than S (windows drawn from a seeded
// generator, printed in the case name), odd S, GQA and MQA, K=V global layers, left-padded batches
// (every query row before the padding ends sees no valid key: the reference gives it the uniform
// average over all keys, reference/ops.cpp), and on CUDA head dims 256 and 512 with S up to 300, so
// that 64-row and 64-key tiles are crossed and partly masked.
//
// Judged per tensor by the tolerance policy: fp32 by check_fp32 against the reference op; bf16/f16
// by the FlashAttention rule, the truth being the reference op in fp32 on the same rounded inputs
// and the baseline the reference op in the dtype.
#include <ATen/ATen.h>

#include "conformance/check.h"
#include "conformance/compare.h"
#include "reference/counter_random.h"

namespace gemma4::conformance {
namespace {

using golden::TensorMap;

constexpr uint64_t kSeed = 2026;
constexpr double kEps = 1e-6;

// One case of the sweep, whatever its op.
struct SweepCase {
  std::string name;                            // "<op>/<case>", the check's name
  int64_t head_dim = 0, sliding_window = 0;    // asked of Capabilities::unsupported; 0: not asked
  std::function<golden::OpTensors()> tensors;  // fp32, on the CPU
  OpForward forward;
};

// ---- attention ----

AttentionOpCase sliding(int64_t window, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int64_t B,
                        std::vector<int64_t> left_padding = {}) {
  return {LayerType::kSliding, window, B, S, Hq, Hkv, D, std::move(left_padding), false};
}

// A window smaller than ("lt", in [1, S - 1]), equal to ("eq") or larger than ("gt", in [S + 1, 2S])
// S, drawn from a seeded generator (counter_integers: the same on every machine) whose stream is
// named after the rest of the case.
AttentionOpCase random_sliding(const std::string& relation, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int64_t B,
                               std::vector<int64_t> left_padding = {}) {
  AttentionOpCase c = sliding(0, S, Hq, Hkv, D, B, std::move(left_padding));
  auto draw = [&](int64_t lo, int64_t hi) {
    return lo + counter_integers(kSeed, "window/" + relation + "/" + c.name(), {1}, hi - lo + 1).item<int64_t>();
  };
  c.window = relation == "lt" ? draw(1, S - 1) : relation == "eq" ? S : draw(S + 1, 2 * S);
  return c;
}

AttentionOpCase full(int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int64_t B, std::vector<int64_t> left_padding = {},
                     bool k_eq_v = false) {
  return {LayerType::kFull, 0, B, S, Hq, Hkv, D, std::move(left_padding), k_eq_v};
}

std::vector<AttentionOpCase> attention_cases(bool cuda) {
  std::vector<AttentionOpCase> cases = {
      random_sliding("lt", 37, 4, 2, 16, 2),
      random_sliding("eq", 37, 4, 2, 16, 2),
      random_sliding("gt", 37, 4, 2, 16, 1),
      random_sliding("lt", 77, 8, 2, 64, 1),
      random_sliding("lt", 129, 4, 1, 16, 1),  // MQA
      full(77, 8, 2, 64, 1),
      full(37, 4, 1, 64, 1, {}, /*k_eq_v=*/true),
      // Left padding: rows 0..4 of batch row 1 see only padding keys (fully masked).
      random_sliding("lt", 37, 4, 2, 16, 2, {0, 5}),
      // Padding longer than the window: 30 fully masked rows, and rows whose window is partly padding.
      sliding(7, 37, 4, 2, 16, 2, {3, 30}),
      full(77, 4, 2, 64, 2, {0, 40}),
  };
  if (cuda) {
    // The released head dims, S up to 300: 64-row/64-key tiles crossed, skipped and partly masked.
    for (AttentionOpCase c : {
             random_sliding("lt", 300, 8, 2, 256, 2),
             random_sliding("eq", 257, 8, 2, 256, 1),
             random_sliding("gt", 193, 8, 2, 256, 1),
             sliding(64, 191, 4, 1, 256, 1),  // one tile wide, MQA
             random_sliding("lt", 300, 8, 2, 256, 2, {0, 100}),
             full(257, 8, 2, 512, 1),
             full(77, 4, 1, 512, 1),
             full(300, 8, 1, 512, 1, {}, /*k_eq_v=*/true),
             full(300, 8, 2, 512, 2, {7, 150}),  // 150 fully masked rows: more than two tiles
         }) {
      cases.push_back(c);
    }
  }
  return cases;
}

SweepCase sweep_case(const AttentionOpCase& c) {
  return {"attention/" + c.name(), c.head_dim, c.sliding_window(), [c] { return attention_op_tensors(c, kSeed); },
          [c](const TensorMap& in, const LayerOps& ops) { return attention_op_forward(c, in, ops); }};
}

// ---- qk_norm_rope ----

// The fused norm + RoPE of one layer from the raw projections: q, k, v [B, S, H, D] and the q/k
// norm weights. K=V: no v (the raw k feeds both paths). KV-shared: no k (nor k_norm), q only.
struct QkNormRopeCase {
  bool proportional = false;
  bool k_eq_v = false;
  bool kv_shared = false;
  int64_t batch = 1, seq = 0, q_heads = 0, kv_heads = 0, head_dim = 0;

  // "default-s37-h4kv2-d16-b2", "proportional-keqv-...", "default-kv-shared-s37-h4-d16-b2"
  std::string name() const {
    std::string s = proportional ? "proportional" : "default";
    if (k_eq_v) s += "-keqv";
    if (kv_shared) s += "-kv-shared";
    s += "-s" + std::to_string(seq) + "-h" + std::to_string(q_heads);
    if (!kv_shared) s += "kv" + std::to_string(kv_heads);
    return s + "-d" + std::to_string(head_dim) + "-b" + std::to_string(batch);
  }
  // golden/op_cases.cpp's: default theta 1e4 (sliding layers), proportional theta 1e6 with a
  // quarter of the dims rotating (global layers).
  RopeParameters rope() const {
    return proportional ? RopeParameters{"proportional", 1e6, 0.25, 1.0} : RopeParameters{"default", 1e4, 1.0, 1.0};
  }

  golden::OpTensors tensors() const {
    const std::string stream = name() + "/";
    auto uniform = [&](const std::string& n, at::IntArrayRef shape, double center = 0.0, double half_width = 1.0) {
      return counter_uniform(kSeed, stream + n, shape, center, half_width);
    };
    golden::OpTensors t;
    t.inputs["q"] = uniform("q", {batch, seq, q_heads, head_dim});
    t.inputs["q_norm"] = uniform("q_norm", {head_dim}, 1.0, 0.5);
    t.upstream["q"] = uniform("upstream/q", {batch, seq, q_heads, head_dim});
    if (kv_shared) return t;
    t.inputs["k"] = uniform("k", {batch, seq, kv_heads, head_dim});
    t.inputs["k_norm"] = uniform("k_norm", {head_dim}, 1.0, 0.5);
    if (!k_eq_v) t.inputs["v"] = uniform("v", {batch, seq, kv_heads, head_dim});
    t.upstream["k"] = uniform("upstream/k", {batch, kv_heads, seq, head_dim});
    t.upstream["v"] = uniform("upstream/v", {batch, kv_heads, seq, head_dim});
    return t;
  }

  TensorMap forward(const TensorMap& in, const LayerOps& ops) const {
    const torch::Tensor& q = in.at("q");
    const RopeTable table = rope_table(rope(), head_dim, seq, q.scalar_type(), q.device());
    auto get = [&](const char* n) { return in.count(n) ? in.at(n) : torch::Tensor(); };
    const QkvOutputs out = ops.qk_norm_rope(q, get("k"), get("v"), in.at("q_norm"), get("k_norm"), table, kEps);
    return {{"q", out.q}, {"k", out.k}, {"v", out.v}};
  }
};

std::vector<QkNormRopeCase> qk_norm_rope_cases(bool cuda) {
  std::vector<QkNormRopeCase> cases = {
      {false, false, false, 2, 37, 4, 2, 16},
      {true, false, false, 1, 37, 4, 2, 64},
      {true, true, false, 2, 37, 4, 1, 64},   // K=V
      {false, false, true, 2, 37, 4, 0, 16},  // KV-shared
  };
  if (cuda) {
    for (QkNormRopeCase c : {
             QkNormRopeCase{false, false, false, 2, 300, 8, 2, 256},
             QkNormRopeCase{true, false, false, 1, 129, 8, 2, 512},
             QkNormRopeCase{true, true, false, 1, 257, 8, 1, 512},
             QkNormRopeCase{true, false, true, 1, 257, 8, 0, 512},
         }) {
      cases.push_back(c);
    }
  }
  return cases;
}

SweepCase sweep_case(const QkNormRopeCase& c) {
  return {"qk_norm_rope/" + c.name(), c.head_dim, 0, [c] { return c.tensors(); },
          [c](const TensorMap& in, const LayerOps& ops) { return c.forward(in, ops); }};
}

// ---- geglu ----

struct GegluCase {
  int64_t batch = 1, seq = 0, intermediate = 0;

  std::string name() const {
    return "b" + std::to_string(batch) + "-s" + std::to_string(seq) + "-i" + std::to_string(intermediate);
  }
  golden::OpTensors tensors() const {
    const std::string stream = name() + "/";
    const std::vector<int64_t> shape{batch, seq, intermediate};
    golden::OpTensors t;
    t.inputs["gate"] = counter_uniform(kSeed, stream + "gate", shape, 0.0, 3.0);  // across GELU's bend
    t.inputs["up"] = counter_uniform(kSeed, stream + "up", shape, 0.0, 1.0);
    t.upstream["out"] = counter_uniform(kSeed, stream + "upstream/out", shape, 0.0, 1.0);
    return t;
  }
};

std::vector<GegluCase> geglu_cases(bool cuda) {
  std::vector<GegluCase> cases = {{2, 37, 48}, {3, 7, 33}};  // the second has an odd element count (693)
  if (cuda) cases.push_back({1, 301, 1031});                  // odd too (310331)
  return cases;
}

SweepCase sweep_case(const GegluCase& c) {
  return {"geglu/" + c.name(), 0, 0, [c] { return c.tensors(); },
          [](const TensorMap& in, const LayerOps& ops) -> TensorMap {
            return {{"out", ops.geglu(in.at("gate"), in.at("up"))}};
          }};
}

// ---- the check ----

void record_tensor(Reporter& r, const std::string& row, const TensorMap& candidate, const std::string& name,
                   const torch::Tensor& reference, const torch::Tensor& truth, torch::ScalarType dtype,
                   golden::Role role) {
  const auto it = candidate.find(name);
  if (it == candidate.end() || !it->second.defined()) {
    return r.fail(row, role == golden::Role::kGradient ? "no gradient reaches it" : "missing from the backend's run");
  }
  try {
    const golden::Verdict v = judge(it->second, reference, truth, dtype, role);
    r.record(row, "max_abs", v.error, v.bound, v.pass, metrics_detail(v.metrics));
  } catch (const std::exception&) {
    r.fail(row, error_message(std::current_exception()));
  }
}

void check_case(const SweepCase& c, const SuiteOptions& o, Reporter& r) {
  const std::string why = o.backend.capabilities.unsupported(o.device, o.dtype, c.head_dim, c.sliding_window);
  if (!why.empty()) return r.not_supported(why);
  const golden::OpTensors t = c.tensors();
  const TensorMap inputs = to_device(t.inputs, o.device, o.dtype);
  const TensorMap upstream = to_device(t.upstream, o.device, o.dtype);
  const OpRun reference = run_op_backward(c.forward, inputs, upstream, reference_layer_ops());
  // The truth: the reference op in fp32 on the inputs and upstream as rounded to the dtype.
  const OpRun truth = o.dtype == torch::kFloat32
                          ? reference
                          : run_op_backward(c.forward, to_device(inputs, o.device, torch::kFloat32),
                                            to_device(upstream, o.device, torch::kFloat32), reference_layer_ops());
  const OpRun candidate = run_op_backward(c.forward, inputs, upstream, o.backend.ops);
  for (const auto& [name, ref] : reference.outputs) {
    record_tensor(r, "outputs/" + name, candidate.outputs, name, ref, truth.outputs.at(name), o.dtype,
                  golden::Role::kForward);
  }
  for (const auto& [name, ref] : reference.grads) {
    record_tensor(r, "grads/" + name, candidate.grads, name, ref, truth.grads.at(name), o.dtype,
                  golden::Role::kGradient);
  }
}

}  // namespace

std::vector<Check> op_sweep_checks(const SuiteOptions& o) {
  const bool cuda = o.device.is_cuda();
  std::vector<SweepCase> cases;
  for (const AttentionOpCase& c : attention_cases(cuda)) cases.push_back(sweep_case(c));
  for (const QkNormRopeCase& c : qk_norm_rope_cases(cuda)) cases.push_back(sweep_case(c));
  for (const GegluCase& c : geglu_cases(cuda)) cases.push_back(sweep_case(c));
  std::vector<Check> checks;
  for (SweepCase& c : cases) {
    const std::string name = c.name;
    checks.push_back({"op_sweep", name, [c = std::move(c)](const SuiteOptions& o, Reporter& r) { check_case(c, o, r); }});
  }
  return checks;
}

}  // namespace gemma4::conformance
