#include "conformance/compare.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <iomanip>
#include <limits>
#include <sstream>

#include "golden/model_cases.h"
#include "golden/tolerance.h"
#include "reference/counter_random.h"
#include "reference/error.h"
#include "reference/ops.h"

namespace gemma4::conformance {

golden::TensorMap training_step(const Config& c, const ModelWeights& w, const golden::TensorMap& inputs,
                                const ForwardOptions& forward) {
  golden::TensorMap out;
  for (auto& [name, t] : golden::run_model(c, w, inputs, forward)) {
    if (name == "outputs/loss" || name == "outputs/logits" || name.rfind("grads/", 0) == 0) out[name] = t;
  }
  return out;
}

golden::TensorMap fp32_training_step(const Config& c, const ModelWeights& w, const golden::TensorMap& inputs,
                                     const ForwardOptions& forward) {
  const ModelWeights w32 =
      golden::weights_from_map(c, golden::weights_to_map(c, w), torch::kFloat32, w.embed_tokens.device());
  // The truth is the reference's ops in fp32: a backend need not support fp32 (the cuda one does not).
  ForwardOptions reference = forward;
  reference.ops = nullptr;
  return training_step(c, w32, inputs, reference);
}

void record_comparison(Reporter& r, const std::string& label, const golden::TensorMap& candidate,
                       const golden::TensorMap& reference, const golden::TensorMap& truth, torch::ScalarType dtype,
                       bool bitwise) {
  int grads = 0, failed = 0;
  double worst_error = 0, worst_bound = 0, worst_ratio = -1;
  std::string worst_name;
  for (const auto& [name, ref] : reference) {
    auto it = candidate.find(name);
    if (it == candidate.end()) {
      r.fail(label + name, "missing from the candidate run");
      continue;
    }
    double error, bound;
    bool pass;
    std::ostringstream detail;
    if (bitwise) {
      pass = at::equal(it->second, ref);
      error = golden::measure(it->second, ref).max_abs;
      bound = 0;
      if (!pass && error == 0) error = std::numeric_limits<double>::quiet_NaN();  // NaN somewhere
      detail << (pass ? "bitwise equal" : "not bitwise equal");
    } else {
      const golden::Verdict v =
          judge(it->second, ref, dtype == torch::kFloat32 ? ref : truth.at(name), dtype, golden::role_of(name));
      error = v.error, bound = v.bound, pass = v.pass;
      detail << metrics_detail(v.metrics);
    }
    if (name.rfind("grads/", 0) != 0) {
      r.record(label + name, "max_abs", error, bound, pass, detail.str());
      continue;
    }
    ++grads;
    if (!pass && ++failed <= 8) r.record(label + name, "max_abs", error, bound, false, detail.str());
    const double ratio = bound > 0 ? error / bound : (error > 0 || !pass ? 1e300 : 0);
    if (ratio > worst_ratio) worst_ratio = ratio, worst_error = error, worst_bound = bound, worst_name = name;
  }
  if (grads == 0) return;
  std::string detail = "worst of " + std::to_string(grads) + ": " + worst_name;
  if (failed) detail += "; " + std::to_string(failed) + " failing";
  r.record(label + "grads/*", "max_abs", worst_error, worst_bound, failed == 0, detail);
}

golden::Verdict judge(const torch::Tensor& candidate, const torch::Tensor& reference, const torch::Tensor& truth,
                      torch::ScalarType dtype, golden::Role role) {
  return dtype == torch::kFloat32 ? golden::check_fp32(candidate, reference, role)
                                  : golden::check_reduced_precision(candidate, reference, truth, dtype, role);
}

std::string metrics_detail(const golden::Metrics& m) {
  std::ostringstream detail;
  detail << "cosine " << std::setprecision(7) << m.cosine << ", nmse " << std::setprecision(3) << m.nmse;
  return detail.str();
}

OpRun run_op_backward(const OpForward& forward, const golden::TensorMap& inputs, const golden::TensorMap& upstream,
                      const LayerOps& ops) {
  // Fresh leaves, so the caller's tensors are never part of the graph.
  golden::TensorMap leaves;
  std::vector<std::string> float_names;
  std::vector<torch::Tensor> float_leaves;
  for (const auto& [name, t] : inputs) {
    leaves[name] = t.is_floating_point() ? t.detach().requires_grad_(true) : t;
    if (!t.is_floating_point()) continue;
    float_names.push_back(name);
    float_leaves.push_back(leaves[name]);
  }
  const golden::TensorMap outputs = forward(leaves, ops);
  std::vector<torch::Tensor> diff_outputs, grad_outputs;
  for (const auto& [name, up] : upstream) {
    const auto it = outputs.find(name);
    if (it == outputs.end() || !it->second.defined()) throw Error("the op returned no '" + name + "'");
    diff_outputs.push_back(it->second);
    grad_outputs.push_back(up);
  }
  const std::vector<torch::Tensor> grads =
      torch::autograd::grad(diff_outputs, float_leaves, grad_outputs, /*retain_graph=*/false,
                            /*create_graph=*/false, /*allow_unused=*/true);
  OpRun run;
  for (size_t i = 0; i < grads.size(); ++i) run.grads[float_names[i]] = grads[i].defined() ? grads[i].detach() : grads[i];
  for (const auto& [name, t] : outputs) {
    if (t.defined()) run.outputs[name] = t.detach();
  }
  return run;
}

golden::TensorMap to_device(const golden::TensorMap& tensors, const torch::Device& device, torch::ScalarType dtype) {
  golden::TensorMap out;
  for (const auto& [name, t] : tensors) out[name] = t.is_floating_point() ? t.to(device, dtype) : t.to(device);
  return out;
}

namespace {
// The K=V path's RoPE: the global layers' proportional RoPE (GEMMA4.md, Forward 3).
const RopeParameters kProportionalRope{"proportional", 1e6, 0.25, 1.0};
constexpr double kEps = 1e-6;
}  // namespace

std::string AttentionOpCase::name() const {
  std::ostringstream s;
  if (type == LayerType::kSliding) {
    s << "sliding-w" << window << "-" << (window < seq ? "lt" : window == seq ? "eq" : "gt");
  } else {
    s << "full";
  }
  if (k_eq_v) s << "-keqv";
  s << "-s" << seq << "-h" << q_heads << "kv" << kv_heads << "-d" << head_dim << "-b" << batch;
  for (size_t b = 0; b < left_padding.size(); ++b) s << (b == 0 ? "-pad" : ",") << left_padding[b];
  return s.str();
}

golden::OpTensors attention_op_tensors(const AttentionOpCase& c, uint64_t seed) {
  if (!c.left_padding.empty() && static_cast<int64_t>(c.left_padding.size()) != c.batch) {
    throw Error("attention case " + c.name() + ": left_padding needs one entry per batch row");
  }
  const std::string stream = c.name() + "/";
  auto uniform = [&](const std::string& name, at::IntArrayRef shape, double center = 0.0, double half_width = 1.0) {
    return counter_uniform(seed, stream + name, shape, center, half_width);
  };
  golden::OpTensors t;
  t.inputs["q"] = uniform("q", {c.batch, c.seq, c.q_heads, c.head_dim});
  if (c.k_eq_v) {
    t.inputs["kv"] = uniform("kv", {c.batch, c.seq, c.kv_heads, c.head_dim});
    t.inputs["k_norm"] = uniform("k_norm", {c.head_dim}, 1.0, 0.5);
  } else {
    t.inputs["k"] = uniform("k", {c.batch, c.kv_heads, c.seq, c.head_dim});
    t.inputs["v"] = uniform("v", {c.batch, c.kv_heads, c.seq, c.head_dim});
  }
  if (!c.left_padding.empty()) {
    // Row b is padding on its first left_padding[b] positions.
    const torch::Tensor left = torch::tensor(c.left_padding, torch::kInt64);
    t.inputs["attention_mask"] = (at::arange(c.seq).unsqueeze(0) >= left.unsqueeze(1)).to(torch::kInt64);
  }
  t.upstream["out"] = uniform("upstream/out", {c.batch, c.seq, c.q_heads * c.head_dim});
  return t;
}

golden::TensorMap attention_op_forward(const AttentionOpCase& c, const golden::TensorMap& in, const LayerOps& ops) {
  torch::Tensor k, v;
  if (c.k_eq_v) {
    const torch::Tensor& kv = in.at("kv");
    const RopeTable rope = rope_table(kProportionalRope, c.head_dim, c.seq, kv.scalar_type(), kv.device());
    k = apply_rope(rms_norm(kv, in.at("k_norm"), kEps), rope).transpose(1, 2);
    v = rms_norm(kv, torch::Tensor(), kEps).transpose(1, 2);
  } else {
    k = in.at("k");
    v = in.at("v");
  }
  const auto padding = in.find("attention_mask");
  const AttentionSpec spec{c.type, c.sliding_window(), /*bidirectional=*/false,
                           padding == in.end() ? torch::Tensor() : padding->second};
  return {{"out", ops.attention(in.at("q"), k, v, spec)}};
}

std::string error_message(const std::exception_ptr& error) {
  std::string s;
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    s = e.what_without_backtrace();
  } catch (const std::exception& e) {
    s = e.what();
  } catch (...) {
    s = "unknown exception";
  }
  return s.substr(0, s.find('\n'));
}

}  // namespace gemma4::conformance
