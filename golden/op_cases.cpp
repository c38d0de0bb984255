#include "golden/op_cases.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <sstream>

#include "golden/op_signatures.h"
#include "reference/counter_random.h"
#include "reference/error.h"

namespace gemma4::golden {
namespace {

using nlohmann::json;
using torch::Tensor;
using ops::Fill;
using ops::InputSpec;
using ops::OutputSpec;
using ops::Signature;

std::string describe(const Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + " on " + t.device().str();
}

// Every input the signature names is present with its shape; floating ones share one dtype and
// device; integer ones are int64 within their bound; nothing else is passed.
void check_inputs(const std::string& op, const Signature& sig, const TensorMap& inputs) {
  const std::string what = "op " + op + ": input '";
  const Tensor* first = nullptr;
  std::string first_name, names;
  for (const InputSpec& spec : sig.inputs) {
    names += (names.empty() ? "" : ", ") + spec.name;
    const auto it = inputs.find(spec.name);
    if (it == inputs.end() || !it->second.defined()) throw Error(what + spec.name + "' missing");
    const Tensor& t = it->second;
    if (t.sizes() != c10::IntArrayRef(spec.shape)) {
      throw Error(what + spec.name + "' has shape " + shape_string(t.sizes()) + " but expected " +
                  shape_string(spec.shape));
    }
    if (spec.fill == Fill::kUniform) {
      if (!t.is_floating_point()) throw Error(what + spec.name + "' is " + describe(t) + " but must be floating");
      // A NaN would only come back as NaN outputs: refuse it here, where it can be named.
      if (!at::isfinite(t).all().item<bool>()) throw Error(what + spec.name + "' holds NaN or infinity");
      if (first && t.scalar_type() != first->scalar_type()) {
        throw Error(what + spec.name + "' is " + describe(t) + " but '" + first_name + "' is " + describe(*first));
      }
      if (!first) {
        first = &t;
        first_name = spec.name;
      }
    } else {
      if (t.scalar_type() != torch::kInt64) throw Error(what + spec.name + "' is " + describe(t) + " but must be int64");
      if (((t < 0) | (t >= spec.bound)).any().item<bool>()) {
        throw Error(what + spec.name + "' holds values outside [0, " + std::to_string(spec.bound) + ")");
      }
    }
  }
  for (const auto& [name, t] : inputs) {
    if (t.device() != first->device()) {
      throw Error(what + name + "' is " + describe(t) + " but '" + first_name + "' is " + describe(*first));
    }
    bool known = false;
    for (const InputSpec& spec : sig.inputs) known = known || spec.name == name;
    if (!known) throw Error(what + name + "' is not read by this op; it reads " + names);
  }
}

// One upstream per differentiable output, shaped like it, in the inputs' dtype and device.
void check_upstream(const std::string& op, const Signature& sig, const TensorMap& upstream, const Tensor& like) {
  const std::string what = "op " + op + ": upstream '";
  for (const auto& [name, t] : upstream) {
    bool known = false;
    for (const OutputSpec& out : sig.outputs) known = known || (out.differentiable && out.name == name);
    if (!known) throw Error(what + name + "' matches no differentiable output");
  }
  for (const OutputSpec& out : sig.outputs) {
    if (!out.differentiable) continue;
    const auto it = upstream.find(out.name);
    if (it == upstream.end() || !it->second.defined()) throw Error(what + out.name + "' missing");
    const Tensor& t = it->second;
    if (t.sizes() != c10::IntArrayRef(out.shape)) {
      throw Error(what + out.name + "' has shape " + shape_string(t.sizes()) + " but expected " + shape_string(out.shape));
    }
    if (t.scalar_type() != like.scalar_type() || t.device() != like.device()) {
      throw Error(what + out.name + "' is " + describe(t) + " but the inputs are " + describe(like));
    }
  }
}

// ---- The catalogue ----

const json kDefaultRope = {{"rope_type", "default"}, {"rope_theta", 1e4}};
const json kProportionalRope = {{"rope_type", "proportional"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.25}};
constexpr double kEps = 1e-6;

json merged(json base, const json& more) {
  base.update(more);
  return base;
}

json heads_params(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, const json& more) {
  return merged(
      {{"batch", B}, {"seq_len", S}, {"num_attention_heads", Hq}, {"num_key_value_heads", Hkv}, {"head_dim", D}}, more);
}
json attention_params(int64_t S, int64_t Hq, int64_t Hkv, int64_t D, const char* type,
                      const json& more = json::object()) {
  return heads_params(2, S, Hq, Hkv, D, merged({{"layer_type", type}}, more));
}

std::vector<OpCase> make_catalogue() {
  const json rms = {{"batch", 2}, {"seq_len", 8}, {"hidden_size", 32}, {"rms_norm_eps", kEps}};
  const json keqv = {{"attention_k_eq_v", true}, {"rope_parameters", kProportionalRope}, {"rms_norm_eps", kEps}};
  return {
      {"rms_norm-scale", "rms_norm", "RMSNorm with weight w (not 1 + w), fp32 inside", merged(rms, {{"scale", true}})},
      {"rms_norm-noscale", "rms_norm", "RMSNorm without weight, as v_norm and the router use it",
       merged(rms, {{"scale", false}})},
      {"rope-default", "rope", "default RoPE (theta 1e4), full rotation: cos/sin tables and y = rope(x)",
       {{"batch", 2}, {"seq_len", 12}, {"num_heads", 2}, {"head_dim", 16}, {"rope_parameters", kDefaultRope}}},
      {"rope-proportional", "rope",
       "proportional RoPE (theta 1e6, partial 0.25, full-D denominator): dims past the rotated pairs pass through",
       {{"batch", 2}, {"seq_len", 12}, {"num_heads", 2}, {"head_dim", 32}, {"rope_parameters", kProportionalRope}}},
      {"qk_norm_rope-sliding", "qk_norm_rope",
       "sliding-layer q/k/v from projections: rope(rms(q)), rope(rms(k)), rms_noscale(v); GQA 4/2",
       heads_params(2, 12, 4, 2, 16, {{"rope_parameters", kDefaultRope}, {"rms_norm_eps", kEps}})},
      {"qk_norm_rope-full-keqv", "qk_norm_rope",
       "full-layer K=V: v = rms_noscale(raw k), no v input; proportional RoPE, one kv head, head dim 32",
       heads_params(2, 12, 4, 1, 32, keqv)},
      {"qk_norm_rope-full-d512-keqv", "qk_norm_rope",
       "full-layer K=V at the released head dim 512, proportional RoPE: 128 of 512 dims rotate, the rest pass through",
       heads_params(1, 8, 4, 1, 512, keqv)},
      {"attention-sliding-window-lt-s", "attention", "sliding attention, window 4 < S 16, GQA 4/2",
       attention_params(16, 4, 2, 16, "sliding_attention", {{"sliding_window", 4}})},
      {"attention-sliding-window-gt-s", "attention", "sliding attention, window 32 > S 12: plain causal",
       attention_params(12, 4, 2, 16, "sliding_attention", {{"sliding_window", 32}})},
      {"attention-sliding-mqa", "attention", "sliding attention, window 6, one kv head for 4 query heads",
       attention_params(16, 4, 1, 16, "sliding_attention", {{"sliding_window", 6}})},
      // Row 1 is left-padded on its first 5 positions (attention_mask follows from left_padding);
      // its query rows 0..4 see no key: don't-care (FORMAT.md).
      {"attention-sliding-padded", "attention", "sliding attention, window 6, with a left-padded batch row",
       attention_params(16, 4, 2, 16, "sliding_attention", {{"sliding_window", 6}, {"left_padding", {0, 5}}})},
      {"attention-global-gqa", "attention", "full causal attention, head dim 32 (twice the sliding one), GQA 4/2",
       attention_params(12, 4, 2, 32, "full_attention")},
      {"attention-global-keqv", "attention",
       "full K=V attention, Hq 8/Hkv 2, D 32: k = rope(rms(kv, k_norm)), v = rms_noscale(kv); grad kv sums both",
       attention_params(12, 8, 2, 32, "full_attention", keqv)},
      {"attention-global-d512-keqv", "attention",
       "full K=V attention at the released head dim 512, 8 query heads per kv head (the 31B ratio), S 12",
       merged(attention_params(12, 8, 1, 512, "full_attention", keqv), {{"batch", 1}})},
      {"geglu", "geglu", "GeGLU activation gelu_tanh(gate) * up, gate across GELU's bend",
       {{"batch", 2}, {"seq_len", 8}, {"intermediate_size", 48}}},
      {"mlp-geglu", "mlp", "GeGLU MLP: down(gelu_tanh(gate x) * up x)",
       {{"batch", 2}, {"seq_len", 8}, {"hidden_size", 32}, {"intermediate_size", 48}}},
      {"moe-top2", "moe", "MoE branch from the residual: router, top-2 of 8 experts, its own norms",
       {{"batch", 2}, {"seq_len", 12}, {"hidden_size", 32}, {"num_experts", 8}, {"top_k_experts", 2},
        {"moe_intermediate_size", 16}, {"rms_norm_eps", kEps}}},
      // Three tokens, six expert slots over eight experts: some experts get no token and some
      // exactly one, the groups a grouped-GEMM kernel (or a skip of rarely hit experts) gets wrong
      // and moe-top2's busy routing never forms.
      {"moe-top2-sparse-routing", "moe", "MoE branch with 3 tokens over 8 experts: experts with no token and with one",
       {{"batch", 1}, {"seq_len", 3}, {"hidden_size", 32}, {"num_experts", 8}, {"top_k_experts", 2},
        {"moe_intermediate_size", 16}, {"rms_norm_eps", kEps}}},
      {"ple-inputs", "ple_inputs", "per-layer inputs [B,S,L,P] from token ids and scaled embeddings (pad id 0)",
       {{"batch", 2}, {"seq_len", 8}, {"hidden_size", 32}, {"num_hidden_layers", 3}, {"hidden_size_per_layer_input", 8},
        {"vocab_size_per_layer_input", 16}, {"pad_token_id", 0}, {"rms_norm_eps", kEps}}},
      {"ple-branch", "ple_branch", "gated per-layer-input branch: rms(proj(gelu(gate h) * ple), norm)",
       {{"batch", 2}, {"seq_len", 8}, {"hidden_size", 32}, {"hidden_size_per_layer_input", 8}, {"rms_norm_eps", kEps}}},
  };
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = make_catalogue();
  return cases;
}

const OpCase* find_op_case(const std::string& name) {
  for (const OpCase& c : op_cases()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

OpCase attention_case(const AttentionGeometry& g) {
  std::ostringstream name;
  const bool sliding = g.type == LayerType::kSliding;
  if (sliding) {
    name << "sliding-w" << g.window << "-" << (g.window < g.seq ? "lt" : g.window == g.seq ? "eq" : "gt");
  } else {
    name << "full";
  }
  if (g.k_eq_v) name << "-keqv";
  name << "-s" << g.seq << "-h" << g.q_heads << "kv" << g.kv_heads << "-d" << g.head_dim << "-b" << g.batch;
  for (size_t b = 0; b < g.left_padding.size(); ++b) name << (b == 0 ? "-pad" : ",") << g.left_padding[b];
  json p = heads_params(g.batch, g.seq, g.q_heads, g.kv_heads, g.head_dim,
                        {{"layer_type", layer_type_name(g.type)}, {"rms_norm_eps", kEps}});
  if (sliding) p["sliding_window"] = g.window;
  if (!g.left_padding.empty()) p["left_padding"] = g.left_padding;
  if (g.k_eq_v) p.update({{"attention_k_eq_v", true}, {"rope_parameters", kProportionalRope}});
  return {name.str(), "attention", "attention " + name.str(), p};
}

OpCase qk_norm_rope_case(const QkNormRopeGeometry& g) {
  std::string name = g.proportional ? "proportional" : "default";
  if (g.k_eq_v) name += "-keqv";
  if (g.kv_shared) name += "-kv-shared";
  name += "-s" + std::to_string(g.seq) + "-h" + std::to_string(g.q_heads);
  if (!g.kv_shared) name += "kv" + std::to_string(g.kv_heads);
  name += "-d" + std::to_string(g.head_dim) + "-b" + std::to_string(g.batch);
  if (g.fp32_norm_weights) name += "-wf32";
  json p = heads_params(g.batch, g.seq, g.q_heads, g.kv_heads, g.head_dim,
                        {{"rope_parameters", g.proportional ? kProportionalRope : kDefaultRope}, {"rms_norm_eps", kEps}});
  if (g.k_eq_v) p["attention_k_eq_v"] = true;
  if (g.kv_shared) p["kv_shared"] = true;
  if (g.fp32_norm_weights) p["fp32_norm_weights"] = true;
  return {name, "qk_norm_rope", "q/k norm + RoPE " + name, p};
}

OpCase geglu_case(int64_t batch, int64_t seq, int64_t intermediate) {
  const std::string name = "b" + std::to_string(batch) + "-s" + std::to_string(seq) + "-i" + std::to_string(intermediate);
  return {name, "geglu", "GeGLU " + name, {{"batch", batch}, {"seq_len", seq}, {"intermediate_size", intermediate}}};
}

TensorMap op_judged(const std::string& op, const nlohmann::json& params, const TensorMap& inputs) {
  const ops::OpDef& def = ops::find_op(op);
  TensorMap out;
  if (!def.dont_care) return out;
  for (auto& [name, mask] : def.dont_care(params, inputs)) {
    // Only outputs with some don't-care position carry a mask (FORMAT.md).
    if (!mask.all().item<bool>()) out["outputs/" + name] = mask.cpu();
  }
  return out;
}

OpTensors make_op_tensors(const OpCase& op_case, uint64_t seed, torch::ScalarType dtype, const torch::Device& device) {
  const Signature sig = ops::signature_of(op_case.op, op_case.params);
  OpTensors t;
  for (const InputSpec& spec : sig.inputs) {
    const std::string stream = "inputs/" + spec.name;
    Tensor value;
    switch (spec.fill) {
      case Fill::kUniform:
        value = counter_uniform(seed, stream, spec.shape, spec.center, spec.half_width).to(device, dtype);
        break;
      case Fill::kIds:
        value = counter_integers(seed, stream, spec.shape, spec.bound).to(device);
        break;
      case Fill::kLeftPadding: {
        // A fixed pattern, not random: row b is padding on its first left_padding[b] positions.
        const Tensor left = torch::tensor(op_case.params.at("left_padding").get<std::vector<int64_t>>());
        value = (at::arange(spec.shape[1]).unsqueeze(0) >= left.unsqueeze(1)).to(torch::kInt64).to(device);
        break;
      }
    }
    t.inputs[spec.name] = value;
  }
  const TensorMap judged = op_judged(op_case.op, op_case.params, t.inputs);
  for (const OutputSpec& out : sig.outputs) {
    if (!out.differentiable) continue;
    Tensor up = counter_uniform(seed, "upstream/" + out.name, out.shape, 0.0, 1.0);
    // No gradient enters through a don't-care position: what an implementation puts there (0, the
    // eager path's average) must not reach a judged gradient.
    if (auto it = judged.find("outputs/" + out.name); it != judged.end()) up = up * it->second.to(up.dtype());
    t.upstream[out.name] = up.to(device, dtype);
  }
  return t;
}

OpResult run_op(const std::string& op, const nlohmann::json& params, const TensorMap& inputs,
                const TensorMap& upstream, const LayerOps& layer_ops) {
  const Signature sig = ops::signature_of(op, params);
  check_inputs(op, sig, inputs);

  // Fresh leaves, so the caller's tensors are never part of the graph.
  TensorMap leaves;
  std::vector<std::string> float_names;
  std::vector<Tensor> float_leaves;
  for (const auto& [name, t] : inputs) {
    leaves[name] = t.is_floating_point() ? t.detach().requires_grad_(true) : t;
    if (t.is_floating_point()) {
      float_names.push_back(name);
      float_leaves.push_back(leaves[name]);
    }
  }
  check_upstream(op, sig, upstream, float_leaves.front());

  TensorMap outputs;
  try {
    outputs = ops::find_op(op).forward(params, leaves, layer_ops);
  } catch (const json::exception& e) {
    throw Error("op " + op + ": bad params " + params.dump() + ": " + e.what());
  }

  // Back-propagating `upstream` is the gradient of sum(output * upstream) over the outputs.
  std::vector<Tensor> diff_outputs, grad_outputs;
  for (const OutputSpec& out : sig.outputs) {
    if (!out.differentiable) continue;
    const auto it = outputs.find(out.name);
    if (it == outputs.end() || !it->second.defined()) throw Error("op " + op + ": the implementation returned no '" + out.name + "'");
    diff_outputs.push_back(it->second);
    grad_outputs.push_back(upstream.at(out.name));
  }
  const std::vector<Tensor> grads = torch::autograd::grad(diff_outputs, float_leaves, grad_outputs,
                                                          /*retain_graph=*/false, /*create_graph=*/false,
                                                          /*allow_unused=*/true);
  OpResult result;
  for (size_t i = 0; i < grads.size(); ++i) {
    // An input that reaches no output gets no gradient: reported by the caller, which knows
    // whether that is the implementation's fault.
    if (grads[i].defined()) result.grads[float_names[i]] = grads[i].detach();
  }
  for (const auto& [name, t] : outputs) result.outputs[name] = t.detach().contiguous();
  return result;
}

}  // namespace gemma4::golden
