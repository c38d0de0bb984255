#include "golden/op_cases.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <utility>

#include "reference/config.h"
#include "reference/counter_random.h"
#include "reference/decoder_layer.h"
#include "reference/error.h"
#include "reference/model.h"
#include "reference/ops.h"
#include "reference/weights.h"

namespace gemma4::golden {
namespace {

using nlohmann::json;
using torch::Tensor;
using Shape = std::vector<int64_t>;

// ---- Tensor signatures: what each op reads and returns, derived from its params ----

// How make_op_tensors fills an input (golden/FORMAT.md, "Generated tensors").
enum class Fill { kUniform, kIds, kLeftPadding };

struct InputSpec {
  std::string name;
  Shape shape;
  Fill fill = Fill::kUniform;
  double center = 0.0, half_width = 1.0;  // kUniform
  int64_t bound = 0;                      // kIds and kLeftPadding: values lie in [0, bound)
};

InputSpec activation(std::string name, Shape shape) { return {std::move(name), std::move(shape)}; }
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

struct OutputSpec {
  std::string name;
  Shape shape;
  bool differentiable = true;  // false for tables that do not depend on the inputs: no upstream
};

struct Signature {
  std::vector<InputSpec> inputs;
  std::vector<OutputSpec> outputs;
};

int64_t dim(const json& p, const char* key) { return p.at(key).get<int64_t>(); }
double eps(const json& p) { return p.at("rms_norm_eps").get<double>(); }
bool k_eq_v(const json& p) { return p.value("attention_k_eq_v", false); }

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
        Hkv(dim(p, "num_key_value_heads")),
        D(dim(p, "head_dim")) {}
};

// decoder_layer.cpp's attention(): k = rope(rms(kr, k_norm)), v = rms_noscale(vr), both as
// [B, Hkv, S, D] (GEMMA4.md, Forward 5). K=V passes the raw key projection as vr.
std::pair<Tensor, Tensor> keys_and_values(const Tensor& k_raw, const Tensor& v_raw, const Tensor& k_norm,
                                          const RopeTable& rope, double eps) {
  return {apply_rope(rms_norm(k_raw, k_norm, eps), rope).transpose(1, 2),
          rms_norm(v_raw, Tensor(), eps).transpose(1, 2)};
}

// ---- The ops ----

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

// Positions are 0..S-1 (rope_table), so the table follows from seq_len: no positions tensor.
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

// From the projections to the q, k, v that attention consumes. With K=V there is no `v` input:
// the raw `k` feeds both paths.
Signature qk_norm_rope_signature(const json& p) {
  const Heads h(p);
  Signature s{{activation("q", {h.B, h.S, h.Hq, h.D}), activation("k", {h.B, h.S, h.Hkv, h.D}),
               norm_scale("q_norm", {h.D}), norm_scale("k_norm", {h.D})},
              {{"q", {h.B, h.S, h.Hq, h.D}}, {"k", {h.B, h.Hkv, h.S, h.D}}, {"v", {h.B, h.Hkv, h.S, h.D}}}};
  if (!k_eq_v(p)) s.inputs.push_back(activation("v", {h.B, h.S, h.Hkv, h.D}));
  return s;
}
TensorMap qk_norm_rope_forward(const json& p, const TensorMap& in, const LayerOps& ops) {
  const Tensor& q = in.at("q");
  const RopeTable rope = rope_table(rope_parameters(p), q.size(3), q.size(1), q.scalar_type(), q.device());
  const QkvOutputs out = ops.qk_norm_rope(q, in.at("k"), k_eq_v(p) ? Tensor() : in.at("v"), in.at("q_norm"),
                                          in.at("k_norm"), rope, eps(p));
  return {{"q", out.q}, {"k", out.k}, {"v", out.v}};
}

// q is post-RoPE; k and v are as attention consumes them. K=V: `kv` is the raw key projection and
// k, v are derived from it inside the op, so its gradient sums the key and the value paths.
Signature attention_signature(const json& p) {
  const Heads h(p);
  Signature s{{activation("q", {h.B, h.S, h.Hq, h.D})}, {{"out", {h.B, h.S, h.Hq * h.D}}}};
  if (k_eq_v(p)) {
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
TensorMap attention_forward(const json& p, const TensorMap& in, const LayerOps& ops) {
  const Tensor& q = in.at("q");
  Tensor k, v;
  if (k_eq_v(p)) {
    const Tensor& kv = in.at("kv");
    const RopeTable rope = rope_table(rope_parameters(p), kv.size(3), kv.size(1), kv.scalar_type(), kv.device());
    std::tie(k, v) = keys_and_values(kv, kv, in.at("k_norm"), rope, eps(p));
  } else {
    k = in.at("k");
    v = in.at("v");
  }
  const auto padding = in.find("attention_mask");
  const AttentionSpec spec{layer_type(p), p.value("sliding_window", int64_t{0}), /*bidirectional=*/false,
                           padding == in.end() ? Tensor() : padding->second};
  return {{"out", ops.attention(q, k, v, spec)}};
}

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

struct OpDef {
  const char* name;
  Signature (*signature)(const json& params);
  TensorMap (*forward)(const json& params, const TensorMap& inputs, const LayerOps& ops);
};

const std::vector<OpDef>& op_defs() {
  static const std::vector<OpDef> defs = {
      {"rms_norm", rms_norm_signature, rms_norm_forward},
      {"rope", rope_signature, rope_forward},
      {"qk_norm_rope", qk_norm_rope_signature, qk_norm_rope_forward},
      {"attention", attention_signature, attention_forward},
      {"mlp", mlp_signature, mlp_forward},
      {"moe", moe_signature, moe_forward},
      {"ple_inputs", ple_inputs_signature, ple_inputs_forward},
      {"ple_branch", ple_branch_signature, ple_branch_forward},
  };
  return defs;
}

const OpDef& find_op(const std::string& op) {
  std::string known;
  for (const OpDef& def : op_defs()) {
    if (op == def.name) return def;
    known += (known.empty() ? "" : ", ") + std::string(def.name);
  }
  throw Error("unknown op '" + op + "'; known ops: " + known);
}

// Params errors (a missing or mistyped field) become gemma4::Error naming the op.
Signature signature_of(const std::string& op, const json& params) {
  const OpDef& def = find_op(op);
  try {
    return def.signature(params);
  } catch (const json::exception& e) {
    throw Error("op " + op + ": bad params " + params.dump() + ": " + e.what());
  }
}

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
      if (t.scalar_type() != torch::kInt64) {
        throw Error(what + spec.name + "' is " + describe(t) + " but must be int64");
      }
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
      throw Error(what + out.name + "' has shape " + shape_string(t.sizes()) + " but expected " +
                  shape_string(out.shape));
    }
    if (t.scalar_type() != like.scalar_type() || t.device() != like.device()) {
      throw Error(what + out.name + "' is " + describe(t) + " but the inputs are " + describe(like));
    }
  }
}

// ---- The catalogue ----

const json kDefaultRope = {{"rope_type", "default"}, {"rope_theta", 1e4}};
const json kProportionalRope = {{"rope_type", "proportional"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.25}};

json merged(json base, const json& more) {
  base.update(more);
  return base;
}

json heads_params(int64_t S, int64_t Hq, int64_t Hkv, int64_t D, const json& more) {
  return merged(
      {{"batch", 2}, {"seq_len", S}, {"num_attention_heads", Hq}, {"num_key_value_heads", Hkv}, {"head_dim", D}}, more);
}
json attention_params(int64_t S, int64_t Hq, int64_t Hkv, int64_t D, const char* type,
                      const json& more = json::object()) {
  return heads_params(S, Hq, Hkv, D, merged({{"layer_type", type}}, more));
}

std::vector<OpCase> make_catalogue() {
  const json rms = {{"batch", 2}, {"seq_len", 8}, {"hidden_size", 32}, {"rms_norm_eps", 1e-6}};
  const json keqv = {{"attention_k_eq_v", true}, {"rope_parameters", kProportionalRope}, {"rms_norm_eps", 1e-6}};
  return {
      {"rms_norm-scale", "rms_norm", "RMSNorm with weight w (not 1 + w), fp32 inside",
       merged(rms, {{"scale", true}})},
      {"rms_norm-noscale", "rms_norm", "RMSNorm without weight, as v_norm and the router use it",
       merged(rms, {{"scale", false}})},
      {"rope-default", "rope", "default RoPE (theta 1e4), full rotation: cos/sin tables and y = rope(x)",
       {{"batch", 2}, {"seq_len", 12}, {"num_heads", 2}, {"head_dim", 16}, {"rope_parameters", kDefaultRope}}},
      {"rope-proportional", "rope",
       "proportional RoPE (theta 1e6, partial 0.25, full-D denominator): dims past the rotated pairs pass through",
       {{"batch", 2}, {"seq_len", 12}, {"num_heads", 2}, {"head_dim", 32}, {"rope_parameters", kProportionalRope}}},
      {"qk_norm_rope-sliding", "qk_norm_rope",
       "sliding-layer q/k/v from projections: rope(rms(q)), rope(rms(k)), rms_noscale(v); GQA 4/2",
       heads_params(12, 4, 2, 16, {{"rope_parameters", kDefaultRope}, {"rms_norm_eps", 1e-6}})},
      {"qk_norm_rope-full-keqv", "qk_norm_rope",
       "full-layer K=V: v = rms_noscale(raw k), no v input; proportional RoPE, one kv head, head dim 32",
       heads_params(12, 4, 1, 32, keqv)},
      {"qk_norm_rope-full-d512-keqv", "qk_norm_rope",
       "full-layer K=V at the released head dim 512, proportional RoPE: 128 of 512 dims rotate, the rest pass through",
       heads_params(8, 4, 1, 512, merged(keqv, {{"batch", 1}}))},
      {"attention-sliding-window-lt-s", "attention", "sliding attention, window 4 < S 16, GQA 4/2",
       attention_params(16, 4, 2, 16, "sliding_attention", {{"sliding_window", 4}})},
      {"attention-sliding-window-gt-s", "attention", "sliding attention, window 32 > S 12: plain causal",
       attention_params(12, 4, 2, 16, "sliding_attention", {{"sliding_window", 32}})},
      {"attention-sliding-mqa", "attention", "sliding attention, window 6, one kv head for 4 query heads",
       attention_params(16, 4, 1, 16, "sliding_attention", {{"sliding_window", 6}})},
      // Row 1 is left-padded on its first 5 positions (attention_mask follows from left_padding).
      {"attention-sliding-padded", "attention", "sliding attention, window 6, with a left-padded batch row",
       attention_params(16, 4, 2, 16, "sliding_attention", {{"sliding_window", 6}, {"left_padding", {0, 5}}})},
      {"attention-global-gqa", "attention", "full causal attention, head dim 32 (twice the sliding one), GQA 4/2",
       attention_params(12, 4, 2, 32, "full_attention")},
      {"attention-global-keqv", "attention",
       "full K=V attention, Hq 8/Hkv 2, D 32: k = rope(rms(kv, k_norm)), v = rms_noscale(kv); grad kv sums both",
       attention_params(12, 8, 2, 32, "full_attention", keqv)},
      {"attention-global-d512-keqv", "attention",
       "full K=V attention at the released head dim 512, 8 query heads per kv head (the 31B ratio), S 12",
       attention_params(12, 8, 1, 512, "full_attention", merged(keqv, {{"batch", 1}}))},
      {"mlp-geglu", "mlp", "GeGLU MLP: down(gelu_tanh(gate x) * up x)",
       {{"batch", 2}, {"seq_len", 8}, {"hidden_size", 32}, {"intermediate_size", 48}}},
      {"moe-top2", "moe", "MoE branch from the residual: router, top-2 of 8 experts, its own norms",
       {{"batch", 2}, {"seq_len", 12}, {"hidden_size", 32}, {"num_experts", 8}, {"top_k_experts", 2},
        {"moe_intermediate_size", 16}, {"rms_norm_eps", 1e-6}}},
      {"ple-inputs", "ple_inputs", "per-layer inputs [B,S,L,P] from token ids and scaled embeddings (pad id 0)",
       {{"batch", 2}, {"seq_len", 8}, {"hidden_size", 32}, {"num_hidden_layers", 3}, {"hidden_size_per_layer_input", 8},
        {"vocab_size_per_layer_input", 16}, {"pad_token_id", 0}, {"rms_norm_eps", 1e-6}}},
      {"ple-branch", "ple_branch", "gated per-layer-input branch: rms(proj(gelu(gate h) * ple), norm)",
       {{"batch", 2}, {"seq_len", 8}, {"hidden_size", 32}, {"hidden_size_per_layer_input", 8}, {"rms_norm_eps", 1e-6}}},
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

OpTensors make_op_tensors(const OpCase& op_case, uint64_t seed, torch::ScalarType dtype, const torch::Device& device) {
  const Signature sig = signature_of(op_case.op, op_case.params);
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
  for (const OutputSpec& out : sig.outputs) {
    if (!out.differentiable) continue;
    t.upstream[out.name] = counter_uniform(seed, "upstream/" + out.name, out.shape, 0.0, 1.0).to(device, dtype);
  }
  return t;
}

OpResult run_op(const std::string& op, const nlohmann::json& params, const TensorMap& inputs,
                const TensorMap& upstream, const LayerOps& ops) {
  const Signature sig = signature_of(op, params);
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
    outputs = find_op(op).forward(params, leaves, ops);
  } catch (const json::exception& e) {
    throw Error("op " + op + ": bad params " + params.dump() + ": " + e.what());
  }

  // Back-propagating `upstream` is the gradient of sum(output * upstream) over the outputs.
  std::vector<Tensor> diff_outputs, grad_outputs;
  for (const OutputSpec& out : sig.outputs) {
    if (!out.differentiable) continue;
    diff_outputs.push_back(outputs.at(out.name));
    grad_outputs.push_back(upstream.at(out.name));
  }
  const std::vector<Tensor> grads = torch::autograd::grad(diff_outputs, float_leaves, grad_outputs,
                                                          /*retain_graph=*/false, /*create_graph=*/false,
                                                          /*allow_unused=*/true);
  OpResult result;
  for (size_t i = 0; i < grads.size(); ++i) {
    // Every floating input must reach an output; an unused one is a bug in this file.
    if (!grads[i].defined()) throw Error("op " + op + ": input '" + float_names[i] + "' gets no gradient");
    result.grads[float_names[i]] = grads[i].detach();
  }
  for (const auto& [name, t] : outputs) result.outputs[name] = t.detach().contiguous();
  return result;
}

}  // namespace gemma4::golden
