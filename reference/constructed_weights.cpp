// The construction of golden/generators/constructed_weights.py (its docstring says what each part
// does and why), written again so that the reference recreates a constructed golden's weights
// without Python. Every value is computed in double, in the Python expression's order, from the
// counter generator's float32 values and rounded once to float32; the file is compiled without
// fused multiply-add (reference/CMakeLists.txt), so the two halves agree bit for bit.
#include "reference/constructed_weights.h"

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <regex>
#include <vector>

#include "reference/counter_random.h"

namespace gemma4 {
namespace {

constexpr int64_t kIdentityFraction = 4;  // the first H / 4 hidden coordinates: the token identity
constexpr double kConstantScale = 1.0, kBosScale = 3.0;
constexpr int64_t kPosPairs = 16, kSinkPairs = 16;
constexpr double kQueryDirectionGain = 0.7;
constexpr double kPostAttention = 0.25, kPostBranch = 0.0625, kLayerScalar = 0.9, kLayerScalarSpread = 0.05, kFinalNorm = 16.0;

enum class Role { kLocal, kSink, kContent, kRetrieval };
struct HeadRole {
  Role role;
  double pos, sink, content;  // shares of the query's energy
};
struct TypeConstruction {
  double gain_pos, gain_sink, gain_content;  // q_norm / k_norm scale of each dim set
  std::array<HeadRole, 4> roles;             // query head h takes roles[h % 4]
};
const TypeConstruction& construction_of(LayerType type) {
  static const TypeConstruction sliding{0.45, 0.42, 0.25,
                                        {{{Role::kLocal, 0.5, 0.0, 0.5},
                                          {Role::kSink, 0.0, 0.5, 0.5},
                                          {Role::kContent, 0.0, 0.0, 1.0},
                                          {Role::kLocal, 0.3, 0.2, 0.5}}}};
  static const TypeConstruction full{0.45, 0.28, 0.25,
                                     {{{Role::kSink, 0.0, 0.6, 0.4},
                                       {Role::kRetrieval, 0.0, 0.3, 0.7},
                                       {Role::kRetrieval, 0.0, 0.0, 1.0},
                                       {Role::kLocal, 0.4, 0.2, 0.4}}}};
  return type == LayerType::kSliding ? sliding : full;
}

// A generator tensor's values widened to double.
std::vector<double> values(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<double>(p, p + c.numel());
}
std::vector<double> base_values(const std::string& name, at::IntArrayRef shape, uint64_t seed) {
  return values(random_weight(name, shape, seed));
}
std::vector<double> unit_stream(uint64_t seed, const std::string& name, int64_t size) {
  return values(counter_uniform(seed, name, {size}, 0.0, std::sqrt(3.0)));
}

torch::Tensor to_float(const std::vector<double>& v, at::IntArrayRef shape) {
  torch::Tensor out = at::empty(shape, at::kFloat);
  float* p = out.data_ptr<float>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
  return out;
}

enum class DimSet { kPos, kSink, kContent };
// Dim d of a head is RoPE pair d mod D/2: pos = the fastest pairs (sliding) or the rotated ones
// (global, proportional RoPE), sink = the slowest pairs, content = the rest.
std::vector<DimSet> dim_sets(const Config& c, LayerType type, int64_t D) {
  const int64_t half = D / 2;
  const int64_t pos_pairs =
      type == LayerType::kSliding ? kPosPairs
                                  : static_cast<int64_t>(c.rope.at(LayerType::kFull).partial_rotary_factor * static_cast<double>(half));
  std::vector<DimSet> out(D);
  for (int64_t d = 0; d < D; ++d) {
    const int64_t pair = d % half;
    out[d] = pair < pos_pairs ? DimSet::kPos : pair >= half - kSinkPairs ? DimSet::kSink : DimSet::kContent;
  }
  return out;
}
int64_t count(const std::vector<DimSet>& sets, DimSet s) { return std::count(sets.begin(), sets.end(), s); }

double role_scale(double share, int64_t D, int64_t dims) {
  return std::sqrt(share * static_cast<double>(D) / static_cast<double>(dims));
}

struct Context {
  int64_t H;
  std::vector<double> identity, constant, bos;  // identity mask; the two context directions
};
Context context_of(const Config& c, uint64_t seed) {
  Context x{c.hidden_size, {}, {}, {}};
  x.identity.resize(x.H);
  for (int64_t i = 0; i < x.H; ++i) x.identity[i] = i < x.H / kIdentityFraction ? 1.0 : 0.0;
  x.constant = unit_stream(seed, "construct.constant", x.H);
  x.bos = unit_stream(seed, "construct.bos", x.H);
  for (int64_t i = 0; i < x.H; ++i) {
    x.constant[i] = x.constant[i] * (1.0 - x.identity[i]);
    x.bos[i] = x.bos[i] * (1.0 - x.identity[i]);
  }
  return x;
}

// k_proj [Hkv * D, H]: pos rows read the constant direction, sink rows the BOS direction, content
// rows the generator's values (global layers: on the identity coordinates only, times 2).
std::vector<double> key_projection(const Config& c, int l, std::vector<double> w, const Context& x, uint64_t seed) {
  const LayerSpec& s = c.layers[l];
  const int64_t D = s.head_dim, H = x.H;
  const std::vector<DimSet> sets = dim_sets(c, s.type, D);
  const std::string pre = "layers." + std::to_string(l) + ".construct.";
  const std::vector<double> u_pos = unit_stream(seed, pre + "pos", D), u_sink = unit_stream(seed, pre + "sink", D);
  for (int64_t g = 0; g < s.num_kv_heads; ++g) {
    for (int64_t d = 0; d < D; ++d) {
      double* row = w.data() + (g * D + d) * H;
      for (int64_t j = 0; j < H; ++j) {
        switch (sets[d]) {
          case DimSet::kPos: row[j] = u_pos[d] * x.constant[j] / static_cast<double>(H); break;
          case DimSet::kSink: row[j] = u_sink[d] * x.bos[j] / static_cast<double>(H); break;
          case DimSet::kContent:
            if (s.type == LayerType::kFull) row[j] = row[j] * x.identity[j] * 2.0;
            break;
        }
      }
    }
  }
  return w;
}

// q_proj [Hq * D, H]: each head's role sets its energy over the dim sets; retrieval heads read the
// identity through their key source's own content rows.
std::vector<double> query_projection(const Config& c, int l, std::vector<double> w, const Context& x, uint64_t seed) {
  const LayerSpec& s = c.layers[l];
  const int source = s.kv_shared ? s.kv_source : l;
  const int64_t D = s.head_dim, H = x.H, Hq = c.num_attention_heads, Hkv = s.num_kv_heads;
  const std::vector<DimSet> sets = dim_sets(c, s.type, D);
  const std::string pre = "layers." + std::to_string(source) + ".construct.";
  const std::vector<double> u_pos = unit_stream(seed, pre + "pos", D), u_sink = unit_stream(seed, pre + "sink", D);
  const std::vector<double> keys =
      base_values("layers." + std::to_string(source) + ".self_attn.k_proj.weight", {Hkv * D, H}, seed);
  const TypeConstruction& t = construction_of(s.type);
  const int64_t n_pos = count(sets, DimSet::kPos), n_sink = count(sets, DimSet::kSink),
                n_content = count(sets, DimSet::kContent);
  for (int64_t h = 0; h < Hq; ++h) {
    const HeadRole& r = t.roles[h % 4];
    const double a_pos = role_scale(r.pos, D, n_pos) / kQueryDirectionGain;
    const double a_sink = role_scale(r.sink, D, n_sink) / kQueryDirectionGain;
    const double a_content = role_scale(r.content, D, n_content);
    const int64_t g = h / (Hq / Hkv);
    for (int64_t d = 0; d < D; ++d) {
      double* row = w.data() + (h * D + d) * H;
      const double* key_row = keys.data() + (g * D + d) * H;
      for (int64_t j = 0; j < H; ++j) {
        switch (sets[d]) {
          case DimSet::kPos: row[j] = a_pos * u_pos[d] * x.constant[j] / static_cast<double>(H); break;
          case DimSet::kSink: row[j] = a_sink * u_sink[d] * x.constant[j] / static_cast<double>(H); break;
          case DimSet::kContent:
            row[j] = r.role == Role::kRetrieval ? a_content * (key_row[j] * x.identity[j] * 2.0) : a_content * row[j];
            break;
        }
      }
    }
  }
  return w;
}

}  // namespace

torch::Tensor constructed_weight(const Config& c, const std::string& name, at::IntArrayRef shape, uint64_t seed) {
  std::vector<double> w = base_values(name, shape, seed);
  const Context x = context_of(c, seed);
  const int64_t H = x.H;
  if (name == "embed_tokens.weight") {
    for (int64_t v = 0; v < shape[0]; ++v) {
      for (int64_t j = 0; j < H; ++j) {
        double& e = w[v * H + j];
        e = e + kConstantScale * x.constant[j];
        if (v == kConstructedBosId) e = e + kBosScale * x.bos[j];
      }
    }
    return to_float(w, shape);
  }
  if (name == "norm.weight") {
    for (double& e : w) e = e * (kFinalNorm / static_cast<double>(H));
    return to_float(w, shape);
  }
  static const std::regex layer_name(R"(layers\.(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(name, m, layer_name)) return to_float(w, shape);
  const int l = std::stoi(m[1].str());
  const std::string local = m[2].str();
  if (local == "post_attention_layernorm.weight") {
    for (double& e : w) e = e * (kPostAttention * std::sqrt(static_cast<double>(H)));
    return to_float(w, shape);
  }
  if (local == "post_feedforward_layernorm.weight" || local == "post_per_layer_input_norm.weight") {
    for (double& e : w) e = e * (kPostBranch * std::sqrt(static_cast<double>(H)));
    return to_float(w, shape);
  }
  if (local == "layer_scalar") return counter_uniform(seed, name, shape, kLayerScalar, kLayerScalarSpread);
  if (local == "self_attn.o_proj.weight" || local == "mlp.down_proj.weight" || local == "per_layer_projection.weight") {
    const int64_t cols = static_cast<int64_t>(w.size()) / H;  // [H, in]: zero the identity rows
    for (int64_t i = 0; i < H; ++i) {
      for (int64_t j = 0; j < cols; ++j) w[i * cols + j] = w[i * cols + j] * (1.0 - x.identity[i]);
    }
    return to_float(w, shape);
  }
  if (local == "experts.down_proj") {  // [E, H, I]
    const int64_t E = shape[0], I = shape[2];
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t i = 0; i < H; ++i) {
        for (int64_t j = 0; j < I; ++j) w[(e * H + i) * I + j] = w[(e * H + i) * I + j] * (1.0 - x.identity[i]);
      }
    }
    return to_float(w, shape);
  }
  const LayerSpec& s = c.layers[l];
  if (local == "self_attn.q_norm.weight" || local == "self_attn.k_norm.weight") {
    const TypeConstruction& t = construction_of(s.type);
    const std::vector<DimSet> sets = dim_sets(c, s.type, s.head_dim);
    for (int64_t d = 0; d < s.head_dim; ++d) {
      w[d] = w[d] * (sets[d] == DimSet::kPos ? t.gain_pos : sets[d] == DimSet::kSink ? t.gain_sink : t.gain_content);
    }
    return to_float(w, shape);
  }
  if (local == "self_attn.k_proj.weight") return to_float(key_projection(c, l, std::move(w), x, seed), shape);
  if (local == "self_attn.q_proj.weight") return to_float(query_projection(c, l, std::move(w), x, seed), shape);
  return to_float(w, shape);
}

ModelWeights constructed_weights(const Config& c, uint64_t seed, torch::ScalarType dtype, const torch::Device& device) {
  ModelWeights w;
  for (WeightSlot& slot : weight_slots(c, w)) *slot.tensor = constructed_weight(c, slot.name, slot.shape, seed).to(device, dtype);
  return w;
}

}  // namespace gemma4
