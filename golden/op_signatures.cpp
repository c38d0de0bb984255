#include "golden/op_signatures.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "reference/config.h"
#include "reference/decoder_layer.h"
#include "reference/error.h"
#include "reference/model.h"
#include "reference/ops.h"
#include "reference/weights.h"

namespace gemma4::golden::ops {
namespace {

using nlohmann::json;
using torch::Tensor;

InputSpec activation(std::string name, Shape shape, double half_width = 1.0) {
  return {std::move(name), std::move(shape), Fill::kUniform, 0.0, half_width};
}
InputSpec norm_scale(std::string name, Shape shape) {
  return {std::move(name), std::move(shape), Fill::kUniform, 1.0, 0.5};
}
// Variance 1/fan_in, fan_in being the last dim of every [out, in] (or [E, out, in]) matrix.
InputSpec projection(std::string name, Shape shape) {
  const double half_width = std::sqrt(3.0 / static_cast<double>(shape.back()));
  return {std::move(name), std::move(shape), Fill::kUniform, 0.0, half_width};
}
InputSpec embedding_table(std::string name, Shape shape) {
  return {std::move(name), std::move(shape), Fill::kUniform, 0.0, std::sqrt(3.0)};
}
InputSpec token_ids(std::string name, Shape shape, int64_t vocab) {
  return {std::move(name), std::move(shape), Fill::kIds, 0.0, 0.0, vocab};
}
InputSpec padding_mask(std::string name, Shape shape) {
  return {std::move(name), std::move(shape), Fill::kLeftPadding, 0.0, 0.0, 2};
}

int64_t dim(const json& p, const char* key) { return p.at(key).get<int64_t>(); }
double eps(const json& p) { return p.at("rms_norm_eps").get<double>(); }
bool flag(const json& p, const char* key) { return p.value(key, false); }

// Same keys as a config.json's rope_parameters entry.
RopeParameters rope_parameters(const json& p) {
  const json& r = p.at("rope_parameters");
  return {r.at("rope_type").get<std::string>(), r.at("rope_theta").get<double>(), r.value("partial_rotary_factor", 1.0),
          r.value("factor", 1.0)};
}

LayerType layer_type(const json& p) {
  const std::string type = p.at("layer_type").get<std::string>();
  for (LayerType t : {LayerType::kSliding, LayerType::kFull}) {
    if (type == layer_type_name(t)) return t;
  }
  throw Error("op attention: layer_type must be 'sliding_attention' or 'full_attention', got '" + type + "'");
}

// The geometry of the attention-side ops.
struct Heads {
  int64_t B, S, Hq, Hkv, D;
  explicit Heads(const json& p)
      : B(dim(p, "batch")),
        S(dim(p, "seq_len")),
        Hq(dim(p, "num_attention_heads")),
        Hkv(flag(p, "kv_shared") ? 0 : dim(p, "num_key_value_heads")),
        D(dim(p, "head_dim")) {}
};

// ---- rms_norm ----

Signature rms_norm_signature(const json& p) {
  const Shape x{dim(p, "batch"), dim(p, "seq_len"), dim(p, "hidden_size")};
  Signature s{{activation("x", x)}, {{"y", x}}};
  if (p.at("scale").get<bool>()) s.inputs.push_back(norm_scale("weight", {x[2]}));
  return s;
}
TensorMap rms_norm_forward(const json& p, const TensorMap& in, const LayerOps& ops) {
  const Tensor weight = p.at("scale").get<bool>() ? in.at("weight") : Tensor();
  return {{"y", ops.rms_norm(in.at("x"), weight, eps(p))}};
}

// ---- rope: positions are 0..S-1 (rope_table), so the table follows from seq_len ----

Signature rope_signature(const json& p) {
  const int64_t S = dim(p, "seq_len"), D = dim(p, "head_dim");
  const Shape x{dim(p, "batch"), S, dim(p, "num_heads"), D};
  return {{activation("x", x)}, {{"cos", {S, D}, false}, {"sin", {S, D}, false}, {"y", x}}};
}
TensorMap rope_forward(const json& p, const TensorMap& in, const LayerOps&) {
  const Tensor& x = in.at("x");
  const RopeTable table = rope_table(rope_parameters(p), x.size(3), x.size(1), x.scalar_type(), x.device());
  return {{"cos", table.cos}, {"sin", table.sin}, {"y", apply_rope(x, table)}};
}

// ---- qk_norm_rope: from the projections to the q, k, v that attention consumes ----
// K=V (attention_k_eq_v): no `v` input, the raw `k` feeds both paths. KV-shared (kv_shared): q only.
// fp32_norm_weights: the op gets q_norm and k_norm converted to fp32 (the same values; their
// gradients come back in the inputs' dtype through the conversion).

Signature qk_norm_rope_signature(const json& p) {
  const Heads h(p);
  Signature s{{activation("q", {h.B, h.S, h.Hq, h.D}), norm_scale("q_norm", {h.D})}, {{"q", {h.B, h.S, h.Hq, h.D}}}};
  if (flag(p, "kv_shared")) return s;
  s.inputs.push_back(activation("k", {h.B, h.S, h.Hkv, h.D}));
  s.inputs.push_back(norm_scale("k_norm", {h.D}));
  if (!flag(p, "attention_k_eq_v")) s.inputs.push_back(activation("v", {h.B, h.S, h.Hkv, h.D}));
  s.outputs.push_back({"k", {h.B, h.Hkv, h.S, h.D}});
  s.outputs.push_back({"v", {h.B, h.Hkv, h.S, h.D}});
  return s;
}
TensorMap qk_norm_rope_forward(const json& p, const TensorMap& in, const LayerOps& ops) {
  const Tensor& q = in.at("q");
  const RopeTable rope = rope_table(rope_parameters(p), q.size(3), q.size(1), q.scalar_type(), q.device());
  auto get = [&](const char* n) { return in.count(n) ? in.at(n) : Tensor(); };
  auto weight = [&](const char* n) {
    const Tensor w = get(n);
    return w.defined() && flag(p, "fp32_norm_weights") ? w.to(torch::kFloat32) : w;
  };
  const QkvOutputs out = ops.qk_norm_rope(q, get("k"), get("v"), weight("q_norm"), weight("k_norm"), rope, eps(p));
  if (flag(p, "kv_shared")) return {{"q", out.q}};
  return {{"q", out.q}, {"k", out.k}, {"v", out.v}};
}

// ---- attention: q is post-RoPE; k and v are as attention consumes them ----
// K=V: `kv` is the raw key projection and k, v are derived from it with the reference's ops
// (k = rope(rms(kv, k_norm)), v = rms_noscale(kv)), so its gradient sums the key and value paths.

Signature attention_signature(const json& p) {
  const Heads h(p);
  Signature s{{activation("q", {h.B, h.S, h.Hq, h.D})}, {{"out", {h.B, h.S, h.Hq * h.D}}}};
  if (flag(p, "attention_k_eq_v")) {
    s.inputs.push_back(activation("kv", {h.B, h.S, h.Hkv, h.D}));
    s.inputs.push_back(norm_scale("k_norm", {h.D}));
  } else {
    s.inputs.push_back(activation("k", {h.B, h.Hkv, h.S, h.D}));
    s.inputs.push_back(activation("v", {h.B, h.Hkv, h.S, h.D}));
  }
  if (p.contains("left_padding")) {
    if (p.at("left_padding").size() != static_cast<size_t>(h.B)) {
      throw Error("op attention: left_padding has " + std::to_string(p.at("left_padding").size()) +
                  " entries for batch " + std::to_string(h.B));
    }
    s.inputs.push_back(padding_mask("attention_mask", {h.B, h.S}));
  }
  return s;
}
AttentionSpec attention_spec_of(const json& p, const TensorMap& in) {
  const auto padding = in.find("attention_mask");
  return {layer_type(p), p.value("sliding_window", int64_t{0}), flag(p, "bidirectional"),
          padding == in.end() ? Tensor() : padding->second};
}
TensorMap attention_forward(const json& p, const TensorMap& in, const LayerOps& ops) {
  Tensor k, v;
  if (flag(p, "attention_k_eq_v")) {
    const Tensor& kv = in.at("kv");
    const RopeTable rope = rope_table(rope_parameters(p), kv.size(3), kv.size(1), kv.scalar_type(), kv.device());
    k = apply_rope(rms_norm(kv, in.at("k_norm"), eps(p)), rope).transpose(1, 2);
    v = rms_norm(kv, Tensor(), eps(p)).transpose(1, 2);
  } else {
    k = in.at("k");
    v = in.at("v");
  }
  return {{"out", ops.attention(in.at("q"), k, v, attention_spec_of(p, in))}};
}
// A query row that sees no key at all (left padding wider than its band) is implementation-defined.
TensorMap attention_dont_care(const json& p, const TensorMap& in) {
  const Tensor& q = in.at("q");
  const Tensor allowed = attention_mask(attention_spec_of(p, in), q.size(0), q.size(1), torch::kFloat32, q.device()) == 0;
  return {{"out", allowed.any(-1).squeeze(1).unsqueeze(-1).to(torch::kInt64)}};  // [B, S, 1]
}

// ---- geglu: gelu_tanh(gate) * up, the activation the MLP, the experts and the PLE gate share ----

Signature geglu_signature(const json& p) {
  const Shape x{dim(p, "batch"), dim(p, "seq_len"), dim(p, "intermediate_size")};
  return {{activation("gate", x, 3.0), activation("up", x)}, {{"out", x}}};  // gate spans GELU's bend
}
TensorMap geglu_forward(const json&, const TensorMap& in, const LayerOps& ops) {
  return {{"out", ops.geglu(in.at("gate"), in.at("up"))}};
}

// ---- mlp, moe, ple: the blocks around the replaceable ops ----

Signature mlp_signature(const json& p) {
  const int64_t H = dim(p, "hidden_size"), I = dim(p, "intermediate_size");
  const Shape x{dim(p, "batch"), dim(p, "seq_len"), H};
  return {{activation("x", x), projection("gate_proj", {I, H}), projection("up_proj", {I, H}),
           projection("down_proj", {H, I})},
          {{"y", x}}};
}
TensorMap mlp_forward(const json&, const TensorMap& in, const LayerOps& ops) {
  return {{"y", mlp({in.at("gate_proj"), in.at("up_proj"), in.at("down_proj")}, in.at("x"), ops)}};
}

// Only what moe() reads: post_feedforward_layernorm_1 belongs to the dense MLP's branch in
// decoder_layer (GEMMA4.md, Forward 4), not to the MoE branch.
Signature moe_signature(const json& p) {
  const int64_t H = dim(p, "hidden_size"), E = dim(p, "num_experts"), I = dim(p, "moe_intermediate_size");
  const Shape x{dim(p, "batch"), dim(p, "seq_len"), H};
  return {{activation("residual", x), projection("router_proj", {E, H}), norm_scale("router_scale", {H}),
           norm_scale("per_expert_scale", {E}), projection("gate_up_proj", {E, 2 * I, H}),
           projection("down_proj", {E, H, I}), norm_scale("pre_feedforward_layernorm_2", {H}),
           norm_scale("post_feedforward_layernorm_2", {H})},
          {{"y", x}}};
}
TensorMap moe_forward(const json& p, const TensorMap& in, const LayerOps& ops) {
  Config config;
  config.hidden_size = dim(p, "hidden_size");
  config.num_experts = dim(p, "num_experts");
  config.top_k_experts = dim(p, "top_k_experts");
  config.moe_intermediate_size = dim(p, "moe_intermediate_size");
  config.rms_norm_eps = eps(p);
  MoeWeights w;
  w.router_proj = in.at("router_proj");
  w.router_scale = in.at("router_scale");
  w.per_expert_scale = in.at("per_expert_scale");
  w.gate_up_proj = in.at("gate_up_proj");
  w.down_proj = in.at("down_proj");
  w.pre_feedforward_layernorm_2 = in.at("pre_feedforward_layernorm_2");
  w.post_feedforward_layernorm_2 = in.at("post_feedforward_layernorm_2");
  return {{"y", moe(config, w, in.at("residual"), ops)}};
}

// GEMMA4.md, Forward 2. `embeddings` stands for the scaled token embeddings E[ids] * sqrt(H).
Signature ple_inputs_signature(const json& p) {
  const int64_t B = dim(p, "batch"), S = dim(p, "seq_len"), H = dim(p, "hidden_size");
  const int64_t L = dim(p, "num_hidden_layers"), P = dim(p, "hidden_size_per_layer_input");
  const int64_t Vp = dim(p, "vocab_size_per_layer_input");
  return {{token_ids("input_ids", {B, S}, Vp), activation("embeddings", {B, S, H}),
           embedding_table("embed_tokens_per_layer", {Vp, L * P}), projection("per_layer_model_projection", {L * P, H}),
           norm_scale("per_layer_projection_norm", {P})},
          {{"per_layer_inputs", {B, S, L, P}}}};
}
TensorMap ple_inputs_forward(const json& p, const TensorMap& in, const LayerOps&) {
  Config config;
  config.hidden_size = dim(p, "hidden_size");
  config.num_hidden_layers = dim(p, "num_hidden_layers");
  config.hidden_size_per_layer_input = dim(p, "hidden_size_per_layer_input");
  config.vocab_size_per_layer_input = dim(p, "vocab_size_per_layer_input");
  config.pad_token_id = dim(p, "pad_token_id");
  config.rms_norm_eps = eps(p);
  ModelWeights w;
  w.embed_tokens_per_layer = in.at("embed_tokens_per_layer");
  w.per_layer_model_projection = in.at("per_layer_model_projection");
  w.per_layer_projection_norm = in.at("per_layer_projection_norm");
  return {{"per_layer_inputs", per_layer_inputs(config, w, in.at("input_ids"), in.at("embeddings"))}};
}

// GEMMA4.md, Forward 4: the gated branch added to a layer's output, from the layer's hidden
// state and its slice of the per-layer inputs.
Signature ple_branch_signature(const json& p) {
  const int64_t B = dim(p, "batch"), S = dim(p, "seq_len"), H = dim(p, "hidden_size");
  const int64_t P = dim(p, "hidden_size_per_layer_input");
  return {{activation("hidden", {B, S, H}), activation("per_layer_input", {B, S, P}),
           projection("per_layer_input_gate", {P, H}), projection("per_layer_projection", {H, P}),
           norm_scale("post_per_layer_input_norm", {H})},
          {{"y", {B, S, H}}}};
}
TensorMap ple_branch_forward(const json& p, const TensorMap& in, const LayerOps& ops) {
  Config config;
  config.rms_norm_eps = eps(p);
  LayerWeights w;
  w.per_layer_input_gate = in.at("per_layer_input_gate");
  w.per_layer_projection = in.at("per_layer_projection");
  w.post_per_layer_input_norm = in.at("post_per_layer_input_norm");
  return {{"y", per_layer_input_branch(config, w, in.at("hidden"), in.at("per_layer_input"), ops)}};
}

const std::vector<OpDef>& op_defs() {
  static const std::vector<OpDef> defs = {
      {"rms_norm", rms_norm_signature, rms_norm_forward, nullptr},
      {"rope", rope_signature, rope_forward, nullptr},
      {"qk_norm_rope", qk_norm_rope_signature, qk_norm_rope_forward, nullptr},
      {"attention", attention_signature, attention_forward, attention_dont_care},
      {"geglu", geglu_signature, geglu_forward, nullptr},
      {"mlp", mlp_signature, mlp_forward, nullptr},
      {"moe", moe_signature, moe_forward, nullptr},
      {"ple_inputs", ple_inputs_signature, ple_inputs_forward, nullptr},
      {"ple_branch", ple_branch_signature, ple_branch_forward, nullptr},
  };
  return defs;
}

}  // namespace

const OpDef& find_op(const std::string& op) {
  std::string known;
  for (const OpDef& def : op_defs()) {
    if (op == def.name) return def;
    known += (known.empty() ? "" : ", ") + std::string(def.name);
  }
  throw Error("unknown op '" + op + "'; known ops: " + known);
}

Signature signature_of(const std::string& op, const json& params) {
  const OpDef& def = find_op(op);
  try {
    return def.signature(params);
  } catch (const json::exception& e) {
    throw Error("op " + op + ": bad params " + params.dump() + ": " + e.what());
  }
}

}  // namespace gemma4::golden::ops
