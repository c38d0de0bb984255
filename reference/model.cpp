#include "reference/model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "reference/checkpoint.h"
#include "reference/decoder_layer.h"
#include "reference/error.h"
#include "reference/ops.h"

namespace gemma4 {
namespace {

using torch::Tensor;

void check_int_matrix(const Tensor& t, const char* name, const Tensor& like) {
  if (t.scalar_type() != torch::kInt64) throw Error(std::string(name) + " must be int64");
  if (t.dim() != 2) throw Error(std::string(name) + " must be [batch, seq], got " + shape_string(t.sizes()));
  if (like.defined() && t.sizes() != like.sizes()) {
    throw Error(std::string(name) + " has shape " + shape_string(t.sizes()) + " but input_ids has " + shape_string(like.sizes()));
  }
}

void check_token_ids(const Config& c, const Tensor& ids) {
  if (!ids.defined()) throw Error("input_ids is missing");
  check_int_matrix(ids, "input_ids", Tensor());
  if (ids.size(1) == 0) throw Error("input_ids has an empty sequence");
  const Tensor bad = (ids < 0) | (ids >= c.vocab_size);
  if (bad.any().item<bool>()) {
    const Tensor where = bad.nonzero()[0].cpu();
    throw Error("input_ids[" + std::to_string(where[0].item<int64_t>()) + ", " + std::to_string(where[1].item<int64_t>()) +
                "] = " + std::to_string(ids.index({where[0], where[1]}).item<int64_t>()) +
                " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  }
  if (c.hidden_size_per_layer_input > 0 && (ids >= c.vocab_size_per_layer_input).any().item<bool>()) {
    throw Error("input_ids holds a token id >= vocab_size_per_layer_input " + std::to_string(c.vocab_size_per_layer_input));
  }
}

void check_positions(const Tensor& positions, const Tensor& ids, int64_t limit) {
  check_int_matrix(positions, "position_ids", ids);
  if ((positions < 0).any().item<bool>()) throw Error("position_ids must not be negative");
  if (limit > 0 && (positions >= limit).any().item<bool>()) {
    throw Error("position_ids holds a position >= " + std::to_string(limit) + ", the run's capacity");
  }
}

void check_mask_values(const Tensor& mask) {
  if (((mask != 0) & (mask != 1)).any().item<bool>()) throw Error("attention_mask must hold only 0 and 1");
}

void validate_inputs(const Config& c, const ForwardInputs& in) {
  check_token_ids(c, in.input_ids);
  if (in.position_ids.defined()) check_positions(in.position_ids, in.input_ids, 0);
  if (in.attention_mask.defined()) {
    check_int_matrix(in.attention_mask, "attention_mask", in.input_ids);
    check_mask_values(in.attention_mask);
  }
  if (in.labels.defined()) {
    check_int_matrix(in.labels, "labels", in.input_ids);
    if ((((in.labels < 0) & (in.labels != -100)) | (in.labels >= c.vocab_size)).any().item<bool>()) {
      throw Error("labels must be -100 or a token id in [0, " + std::to_string(c.vocab_size) + ")");
    }
  }
}

// The tensors a layer receives, flattened for checkpoint() and back.
std::vector<Tensor> pack(const LayerInputs& in) {
  return {in.hidden,   in.per_layer_input, in.shared_k, in.shared_v,     in.rope_cos,
          in.rope_sin, in.padding,         in.rope_positions, in.segments};
}
LayerInputs unpack(const std::vector<Tensor>& t) { return {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]}; }
// A replaced hand-off's in-layer step: what arrived as inputs becomes what attention reads.
void apply_in_layer(const KvHandoff::InLayer& in_layer, LayerInputs& in) {
  if (!in_layer) return;
  const SharedKv kv = in_layer({in.shared_k, in.shared_v});
  in.shared_k = kv.k;
  in.shared_v = kv.v;
}

}  // namespace

Tensor per_layer_inputs(const Config& c, const ModelWeights& w, const Tensor& ids, const Tensor& embeds,
                        const LayerOps& ops) {
  const int64_t B = ids.size(0), S = ids.size(1), L = c.num_hidden_layers, P = c.hidden_size_per_layer_input;
  const auto dtype = w.embed_tokens_per_layer.scalar_type();
  // The scale is cast to the weight dtype first, as transformers' scaled embedding does.
  const Tensor token_scale = at::scalar_tensor(std::sqrt(static_cast<double>(P)), torch::kFloat32).to(dtype);
  const Tensor token = ops.scaled_embedding(w.embed_tokens_per_layer, ids, token_scale, c.pad_token_id).reshape({B, S, L, P});
  Tensor context = ops.linear(embeds, w.per_layer_model_projection) * std::pow(static_cast<double>(c.hidden_size), -0.5);
  context = rms_norm(context.reshape({B, S, L, P}), w.per_layer_projection_norm, c.rms_norm_eps);
  return (context + token) * std::pow(2.0, -0.5);
}

Model::Model(Config config, ModelWeights weights, std::string key_prefix)
    : config_(std::make_shared<const Config>(std::move(config))),
      weights_(std::move(weights)),
      key_prefix_(std::move(key_prefix)) {}

ForwardOutputs Model::forward(const ForwardInputs& inputs, const ForwardOptions& options) const {
  const Config& c = *config_;
  validate_inputs(c, inputs);
  if (!options.checkpoint_layers.empty() && static_cast<int64_t>(options.checkpoint_layers.size()) != c.num_hidden_layers) {
    throw Error("checkpoint_layers has " + std::to_string(options.checkpoint_layers.size()) + " entries for " +
                std::to_string(c.num_hidden_layers) + " layers");
  }
  const torch::Device device = this->device();
  const auto dtype = this->dtype();
  const LayerOps& ops = options.ops ? *options.ops : reference_layer_ops();
  const Tensor ids = inputs.input_ids.to(device);
  const Tensor padding = inputs.attention_mask.defined() ? inputs.attention_mask.to(device) : Tensor();
  const Tensor positions = inputs.position_ids.defined() ? inputs.position_ids.to(device) : Tensor();
  const int64_t rows = positions.defined() ? positions.max().item<int64_t>() + 1 : ids.size(1);
  const Tensor segments = packed_sequences(positions, padding);

  auto [h, ple] = embed(ids, &ops);
  std::map<LayerType, RopeTable> rope;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerType type = c.layer_types[l];
    if (rope.count(type)) continue;
    rope[type] = rope_table(c.rope.at(type), c.layers[l].head_dim, rows, dtype, device);
  }

  ForwardOutputs out;
  if (options.keep_hidden_states) out.hidden_states.push_back(h);
  // The shared K/V of this call only (reference/kv_handoff.h): layers receive them as tensor
  // inputs, and the reference hand-off lives on this stack frame.
  const std::unique_ptr<KvHandoff> handoff = options.kv_handoff ? (*options.kv_handoff)(c) : local_kv_handoff(c);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerSpec& spec = c.layers[l];
    LayerInputs in{h, ple.defined() ? ple.select(2, l) : Tensor(), Tensor(), Tensor(),
                   rope[spec.type].cos, rope[spec.type].sin, padding, positions, segments};
    KvHandoff::InLayer in_layer;
    if (spec.kv_shared) {
      const std::string key = kv_read_key(c, l, options.kv_key);
      const SharedKv kv = handoff->inputs_for(l, key);
      in.shared_k = kv.k;
      in.shared_v = kv.v;
      in_layer = handoff->in_layer(l, key);
    }
    LayerOutputs layer_out;
    if (!options.checkpoint_layers.empty() && options.checkpoint_layers[l]) {
      // The closure holds the config (immutable, shared), the layer's weights and ops: plain
      // data. Only a replaced hand-off adds its in_layer function (the faulty backends' bugs).
      auto fn = [config = config_, l, w = weights_.layers[l], ops, in_layer](const std::vector<Tensor>& t) {
        LayerInputs layer_in = unpack(t);
        apply_in_layer(in_layer, layer_in);
        const LayerOutputs o = decoder_layer(*config, l, w, layer_in, ops);
        return std::vector<Tensor>{o.hidden, o.k, o.v, o.attention};
      };
      const std::vector<Tensor> o = checkpoint(fn, pack(in), trainable_tensors(c, l, weights_.layers[l]));
      layer_out = {o[0], o[3], o[1], o[2]};
    } else {
      apply_in_layer(in_layer, in);
      layer_out = decoder_layer(c, l, weights_.layers[l], in, ops);
    }
    h = layer_out.hidden;
    if (spec.stores_kv) handoff->store(l, kv_write_key(c, l, options.kv_key), {layer_out.k, layer_out.v});
    if (options.keep_layer_outputs) {
      out.attention_outputs.push_back(layer_out.attention);
      if (layer_out.router_logits.defined()) out.router_logits.push_back(layer_out.router_logits);
      if (spec.stores_kv) out.stored_kv[l] = {layer_out.k, layer_out.v};
    }
    if (options.keep_hidden_states && l + 1 < c.num_hidden_layers) out.hidden_states.push_back(h);
  }

  h = ops.rms_norm(h, weights_.norm, c.rms_norm_eps);
  if (options.keep_hidden_states) out.hidden_states.push_back(h);
  out.logits = head(h, &ops);
  if (inputs.labels.defined()) out.loss = causal_lm_loss(out.logits, inputs.labels);
  return out;
}

std::pair<Tensor, Tensor> Model::embed(const Tensor& ids, const LayerOps* ops_in) const {
  const Config& c = *config_;
  const LayerOps& ops = ops_in ? *ops_in : reference_layer_ops();
  // GEMMA4.md, Forward 1: sqrt(H) is cast to the weight dtype before scaling (bf16: 55.5 for H=3072).
  const Tensor scale = at::scalar_tensor(std::sqrt(static_cast<double>(c.hidden_size)), torch::kFloat32).to(dtype());
  // padding_idx = pad_token_id: the pad row's lookup gets no gradient, as in transformers.
  const Tensor h = ops.scaled_embedding(weights_.embed_tokens, ids, scale, c.pad_token_id);
  return {h, c.hidden_size_per_layer_input > 0 ? per_layer_inputs(c, weights_, ids, h, ops) : Tensor()};
}

Tensor Model::head(const Tensor& normed, const LayerOps* ops) const {
  const Config& c = *config_;
  const LayerOps& o = ops ? *ops : reference_layer_ops();
  const Tensor logits = o.linear(normed, c.tie_word_embeddings ? weights_.embed_tokens : weights_.lm_head);
  if (!c.final_logit_softcapping) return logits;
  return o.logit_softcap(logits, *c.final_logit_softcapping);
}

DecodeState Model::start_decode(int64_t batch, int64_t capacity, const KvCacheOps& cache_ops,
                                KvKeyConvention kv_key, int64_t max_rollback) const {
  const Config& c = *config_;
  if (c.bidirectional) throw Error("use_bidirectional_attention is 'all': a bidirectional model does not decode");
  if (batch <= 0 || capacity <= 0) throw Error("start_decode: batch and capacity must be positive");
  if (max_rollback < 0) throw Error("start_decode: max_rollback must not be negative");
  if (max_rollback > 0 && !cache_ops.rollback) {
    throw Error("start_decode: speculative decoding (max_rollback " + std::to_string(max_rollback) +
                ") needs the cache ops' rollback, which this backend does not have");
  }
  DecodeState state;
  state.cache_ops = &cache_ops;
  state.capacity = capacity;
  state.max_rollback = max_rollback;
  state.kv_key = kv_key;
  int64_t widest_head_dim = 0;
  for (const LayerSpec& spec : c.layers) widest_head_dim = std::max(widest_head_dim, spec.head_dim);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerSpec& spec = c.layers[l];
    if (!state.rope.count(spec.type)) {
      state.rope[spec.type] = rope_table(c.rope.at(spec.type), spec.head_dim, capacity, dtype(), device());
    }
    if (spec.kv_shared) continue;
    CacheSpec cache{l, spec.type, batch, spec.num_kv_heads, spec.head_dim, spec.type == LayerType::kSliding ? c.sliding_window : 0,
                    capacity, dtype(), device(), max_rollback, widest_head_dim};
    state.caches[l] = cache_ops.make(cache);
    if (spec.stores_kv) state.stored[kv_write_key(c, l, kv_key)] = l;
  }
  return state;
}

Tensor Model::decode(DecodeState& state, const Tensor& ids_in, const Tensor& positions_in, const Tensor& padding_in,
                     const LayerOps* ops_in) const {
  const Config& c = *config_;
  const LayerOps& ops = ops_in ? *ops_in : reference_layer_ops();
  check_token_ids(c, ids_in);
  check_positions(positions_in, ids_in, state.capacity);
  const int64_t B = ids_in.size(0), step = ids_in.size(1), end = state.length + step;
  if (end > state.capacity) {
    throw Error("decode: " + std::to_string(end) + " token indices exceed the run's capacity " + std::to_string(state.capacity));
  }
  check_int_matrix(padding_in, "attention_mask", Tensor());
  check_mask_values(padding_in);
  if (padding_in.size(0) != B || padding_in.size(1) != end) {
    throw Error("decode: attention_mask has shape " + shape_string(padding_in.sizes()) + ", expected [" +
                std::to_string(B) + ", " + std::to_string(end) + "] (every index so far)");
  }
  const Tensor ids = ids_in.to(device()), positions = positions_in.to(device()), padding = padding_in.to(device());

  auto [h, ple] = embed(ids, &ops);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerSpec& spec = c.layers[l];
    const RopeTable& rope = state.rope.at(spec.type);
    LayerInputs in{h, ple.defined() ? ple.select(2, l) : Tensor(), Tensor(), Tensor(), rope.cos, rope.sin, padding,
                   positions};
    int owner = l;
    if (spec.kv_shared) {  // its source's cache, found under the key the convention reads
      const std::string key = kv_read_key(c, l, state.kv_key);
      const auto source = state.stored.find(key);
      if (source == state.stored.end()) throw Error("layer " + std::to_string(l) + ": no cache stored under '" + key + "'");
      owner = source->second;
    }
    in.cache = state.caches.at(owner).get();
    in.cache_ops = state.cache_ops;
    in.cache_start = state.length;
    h = decoder_layer(c, l, weights_.layers[l], in, ops).hidden;
  }
  state.length = end;
  state.rolled_back = 0;
  return head(ops.rms_norm(h, weights_.norm, c.rms_norm_eps), &ops);
}

void Model::rollback(DecodeState& state, int64_t n) const {
  if (!state.cache_ops || !state.cache_ops->rollback) throw Error("rollback: the cache ops have no rollback");
  const int64_t allowed = std::min(state.max_rollback - state.rolled_back, state.length);
  if (n < 1 || n > allowed) {
    throw Error("rollback: " + std::to_string(n) + " indices, but 1 to " + std::to_string(allowed) +
                " may be taken back (max_rollback " + std::to_string(state.max_rollback) + " since the last step)");
  }
  for (auto& [layer, cache] : state.caches) state.cache_ops->rollback(*cache, n);
  state.length -= n;
  state.rolled_back += n;
}

void Model::set_requires_grad(bool requires_grad) { gemma4::set_requires_grad(*config_, weights_, requires_grad); }

std::vector<std::pair<std::string, Tensor>> Model::named_trainable_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  ModelWeights& w = const_cast<ModelWeights&>(weights_);  // slots are only read
  for (const WeightSlot& slot : weight_slots(*config_, w)) {
    if (slot.trainable && slot.tensor->defined()) out.emplace_back(checkpoint_key(slot.name), *slot.tensor);
  }
  return out;
}

std::string Model::checkpoint_key(const std::string& name) const {
  return name == "lm_head.weight" ? name : key_prefix_ + name;
}

}  // namespace gemma4
