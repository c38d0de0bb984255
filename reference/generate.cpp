#include "reference/generate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "reference/error.h"

namespace gemma4 {

using torch::Tensor;

Tensor generation_positions(const Tensor& attention_mask) {
  return (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0);
}

Tensor continued_positions(const Tensor& prompt_mask, int64_t length) {
  const Tensor prompt = generation_positions(prompt_mask);
  const int64_t added = length - prompt.size(1);
  if (added < 0) throw Error("continued_positions: length is shorter than the prompt");
  return at::cat({prompt, prompt.slice(1, -1) + at::arange(1, added + 1, prompt.options())}, 1);
}

Tensor inferred_generation_mask(const Tensor& input_ids, int64_t pad_token_id,
                                const std::vector<int64_t>& eos_token_ids) {
  const bool pad_is_eos = std::find(eos_token_ids.begin(), eos_token_ids.end(), pad_token_id) != eos_token_ids.end();
  if (pad_token_id < 0 || pad_is_eos || !(input_ids == pad_token_id).any().item<bool>()) {
    return at::ones_like(input_ids, input_ids.options().dtype(torch::kInt64));
  }
  return input_ids.ne(pad_token_id).to(torch::kInt64);
}

namespace {

void check_prompt(const Tensor& input_ids, const Tensor& attention_mask, const GenerateOptions& options) {
  if (options.prefill_chunk < 0) throw Error("prefill_chunk must not be negative");
  if (input_ids.dim() != 2 || input_ids.scalar_type() != torch::kInt64) throw Error("input_ids must be int64 [B, S]");
  if (attention_mask.defined() &&
      (attention_mask.sizes() != input_ids.sizes() || attention_mask.scalar_type() != torch::kInt64)) {
    throw Error("attention_mask must be int64 with the shape of input_ids [B, S]");
  }
}

// The prompt's tokens into the caches, options.prefill_chunk at a time (0: all at once): the
// logits of each chunk, in order.
std::vector<Tensor> prefill(const Model& model, DecodeState& state, const Tensor& ids, const Tensor& positions,
                            const Tensor& mask, const GenerateOptions& options) {
  const int64_t S = ids.size(1);
  const int64_t chunk = options.prefill_chunk > 0 ? options.prefill_chunk : S;
  std::vector<Tensor> logits;
  for (int64_t a = 0; a < S; a += chunk) {
    const int64_t b = std::min(S, a + chunk);
    logits.push_back(model.decode(state, ids.slice(1, a, b), positions.slice(1, a, b), mask.slice(1, 0, b), options.ops));
  }
  return logits;
}

void keep_prompt_caches(const DecodeState& state, std::map<int, CacheContents>* out) {
  if (!out) return;
  for (const auto& [layer, cache] : state.caches) (*out)[layer] = state.cache_ops->contents(*cache);
}

const KvCacheOps& cache_ops_of(const GenerateOptions& options) {
  return options.cache_ops ? *options.cache_ops : reference_kv_cache_ops();
}

}  // namespace

GenerateOutputs generate(const Model& model, const Tensor& input_ids, const Tensor& attention_mask,
                         const GenerateOptions& options) {
  if (options.max_new_tokens < 1) throw Error("max_new_tokens must be at least 1");
  check_prompt(input_ids, attention_mask, options);
  torch::NoGradGuard no_grad;
  const int64_t B = input_ids.size(0), S = input_ids.size(1), N = options.max_new_tokens;
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  // The bookkeeping stays on the CPU; the model moves what it reads.
  Tensor ids = input_ids.cpu();
  Tensor mask = attention_mask.defined() ? attention_mask.cpu() : at::ones({B, S}, i64);
  Tensor positions = generation_positions(mask);

  GenerateOutputs out;
  std::vector<Tensor> scores;
  // Chooses the next token from the last logits and appends it: real (mask 1), at the row's last
  // position + 1 (transformers' rule, also after right padding).
  auto choose = [&](const Tensor& logits) {
    const Tensor last = logits.select(1, -1).to(torch::kFloat32).cpu();
    scores.push_back(last);
    const Tensor next = last.argmax(-1).unsqueeze(1);
    ids = at::cat({ids, next}, 1);
    mask = at::cat({mask, at::ones({B, 1}, i64)}, 1);
    positions = at::cat({positions, positions.slice(1, -1) + 1}, 1);
    return next;
  };

  if (!options.use_cache) {
    ForwardOptions forward;
    forward.kv_key = options.kv_key;
    forward.keep_hidden_states = false;
    forward.ops = options.ops;
    for (int64_t step = 0; step < N; ++step) {
      ForwardInputs in{ids, mask, Tensor(), positions};
      choose(model.forward(in, forward).logits);
    }
  } else {
    DecodeState state = model.start_decode(B, S + N, cache_ops_of(options), options.kv_key);
    Tensor logits = prefill(model, state, ids, positions, mask, options).back();
    keep_prompt_caches(state, &out.prompt_caches);
    for (int64_t step = 0; step < N; ++step) {
      const Tensor next = choose(logits);
      if (step + 1 < N) logits = model.decode(state, next, positions.slice(1, -1), mask, options.ops);
    }
  }
  out.sequences = ids;
  out.scores = at::stack(scores);
  return out;
}

namespace {

// Teacher forcing's common part: the mask and positions of `length` indices (the prompt's, then
// real tokens one position apart) and a decode run whose prompt is already in the caches.
struct TeacherForced {
  Tensor mask, positions;
  DecodeState state;
  std::vector<Tensor> logits;  // the prompt's chunks
};

TeacherForced start_teacher_forced(const Model& model, const Tensor& tokens, const Tensor& prompt_mask,
                                   int64_t prompt_length, int64_t length, int64_t max_rollback,
                                   const GenerateOptions& options, std::map<int, CacheContents>* prompt_caches) {
  if (tokens.dim() != 2 || prompt_length < 1 || prompt_length > tokens.size(1)) {
    throw Error("decode_logits: tokens must be [B, T] with 1 <= prompt_length <= T");
  }
  const Tensor prompt = tokens.slice(1, 0, prompt_length).cpu();
  check_prompt(prompt, prompt_mask, options);
  const int64_t B = tokens.size(0);
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  TeacherForced run;
  run.mask = at::cat({prompt_mask.defined() ? prompt_mask.cpu() : at::ones_like(prompt),
                      at::ones({B, length - prompt_length}, i64)}, 1);
  run.positions = continued_positions(run.mask.slice(1, 0, prompt_length), length);
  run.state = model.start_decode(B, length, cache_ops_of(options), options.kv_key, max_rollback);
  run.logits = prefill(model, run.state, prompt, run.positions, run.mask, options);
  keep_prompt_caches(run.state, prompt_caches);
  return run;
}

Tensor gathered(std::vector<Tensor>& logits) {
  for (Tensor& l : logits) l = l.to(torch::kFloat32).cpu();
  return at::cat(logits, 1);
}

}  // namespace

Tensor decode_logits(const Model& model, const Tensor& tokens, const Tensor& prompt_mask, int64_t prompt_length,
                     const GenerateOptions& options, std::map<int, CacheContents>* prompt_caches) {
  torch::NoGradGuard no_grad;
  const int64_t T = tokens.size(-1);
  TeacherForced run = start_teacher_forced(model, tokens, prompt_mask, prompt_length, T, 0, options, prompt_caches);
  const Tensor ids = tokens.cpu();
  for (int64_t t = prompt_length; t < T; ++t) {
    run.logits.push_back(model.decode(run.state, ids.slice(1, t, t + 1), run.positions.slice(1, t, t + 1),
                                      run.mask.slice(1, 0, t + 1), options.ops));
  }
  return gathered(run.logits);
}

Tensor speculative_logits(const Model& model, const Tensor& tokens, const Tensor& prompt_mask, int64_t prompt_length,
                          const GenerateOptions& options, const std::vector<Draft>& drafts) {
  torch::NoGradGuard no_grad;
  const int64_t T = tokens.size(-1);
  int64_t accepted = 0, longest = 0;
  for (const Draft& d : drafts) {
    if (d.accepted < 1 || d.accepted > d.length) throw Error("speculative_logits: a draft accepts 1 to length tokens");
    accepted += d.accepted;
    longest = std::max(longest, d.length);
  }
  if (prompt_length + accepted != T) {
    throw Error("speculative_logits: the drafts accept " + std::to_string(accepted) + " tokens, the prompt leaves " +
                std::to_string(T - prompt_length));
  }
  // Indices up to T + longest: the last draft's rejected tokens lie past the last true one.
  TeacherForced run =
      start_teacher_forced(model, tokens, prompt_mask, prompt_length, T + longest, longest - 1, options, nullptr);
  const Tensor ids = tokens.cpu();
  const Tensor guesses = ids.index_select(1, (at::arange(T + longest, ids.options()) * 7 + 3).remainder(T));
  int64_t t = prompt_length;
  for (const Draft& d : drafts) {
    const Tensor fed = at::cat({ids.slice(1, t, t + d.accepted), guesses.slice(1, t + d.accepted, t + d.length)}, 1);
    const Tensor logits = model.decode(run.state, fed, run.positions.slice(1, t, t + d.length),
                                       run.mask.slice(1, 0, t + d.length), options.ops);
    run.logits.push_back(logits.slice(1, 0, d.accepted));
    if (d.length > d.accepted) model.rollback(run.state, d.length - d.accepted);
    t += d.accepted;
  }
  return gathered(run.logits);
}

}  // namespace gemma4
