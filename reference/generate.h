#pragma once
// Greedy generation as transformers' generate(do_sample=False, output_logits=True) computes it
// (GEMMA4.md, "Decoding with a cache"): the RoPE positions of a padded batch come from the
// attention mask, every new token is real, and each step's token is the argmax of the last
// logits in fp32. Exactly max_new_tokens tokens are made: no stop at an end-of-sequence token.
#include <torch/types.h>

#include <map>
#include <vector>

#include "reference/kv_cache.h"
#include "reference/model.h"

namespace gemma4 {

struct GenerateOptions {
  int64_t max_new_tokens = 1;
  bool use_cache = true;      // false: the full forward over every token at every step
  int64_t prefill_chunk = 0;  // > 0: the prompt enters the cache this many tokens at a time
  KvKeyConvention kv_key = KvKeyConvention::kLayerType;
  const LayerOps* ops = nullptr;          // nullptr: the reference ops
  const KvCacheOps* cache_ops = nullptr;  // nullptr: the reference cache
};

struct GenerateOutputs {
  torch::Tensor sequences;  // [B, S + N] int64: the prompt, then the new tokens
  torch::Tensor scores;     // [N, B, V] float32: the logits each new token was chosen from
  // With a cache: what each layer's cache holds after the prompt, by layer (KV-shared layers own none).
  std::map<int, CacheContents> prompt_caches;
};

// input_ids [B, S] int64; attention_mask [B, S] int64 (1 token, 0 padding) or undefined: every
// token real (transformers instead infers one from pad tokens when none is given).
GenerateOutputs generate(const Model& model, const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                         const GenerateOptions& options);

// Teacher forcing through the cache: the logits [B, T, V] (float32) of every token of `tokens` [B, T],
// the first `prompt_length` of them fed as generate feeds a prompt (prefill, in chunks of
// options.prefill_chunk) and each later one in a step of its own, as generate would feed it had it
// chosen that token. prompt_mask [B, prompt_length] (undefined: every token real); the tokens after
// the prompt are real. Logits at t predict token t + 1; those of padding rows are implementation-
// defined. options.max_new_tokens and use_cache are not read. prompt_caches: filled as in generate.
torch::Tensor decode_logits(const Model& model, const torch::Tensor& tokens, const torch::Tensor& prompt_mask,
                            int64_t prompt_length, const GenerateOptions& options,
                            std::map<int, CacheContents>* prompt_caches = nullptr);

// A speculative draft, teacher-forced: `length` tokens fed in one step, of which the first
// `accepted` (1 <= accepted <= length) are the true next tokens and the rest a rejected guess that
// Model::rollback takes back.
struct Draft {
  int64_t length = 1, accepted = 1;
};

// decode_logits with speculative decoding after the prompt: each draft in turn is fed as one step
// and its rejected tokens rolled back. The accepted counts must add up to T - prompt_length. A
// rejected token is another token of its row (the one at index (7t + 3) mod T), fed at the index and
// position the true token t takes. Returns what plain decoding returns: the logits [B, T, V]
// (float32) of every true token; a rejected token's logits are dropped. Throws gemma4::Error when
// the cache ops have no rollback.
torch::Tensor speculative_logits(const Model& model, const torch::Tensor& tokens, const torch::Tensor& prompt_mask,
                                 int64_t prompt_length, const GenerateOptions& options,
                                 const std::vector<Draft>& drafts);

// The RoPE positions transformers' generate gives a prompt: cumsum(mask) - 1, 0 at padding.
torch::Tensor generation_positions(const torch::Tensor& attention_mask);

// The positions of a prompt [B, S] followed by length - S new tokens: the prompt's from its mask
// (generation_positions), each new token one past the token before it (generate's rule).
torch::Tensor continued_positions(const torch::Tensor& prompt_mask, int64_t length);

// The mask transformers' generate infers for a prompt given without one: ids != pad_token_id when
// the pad token occurs in the prompt and is not an end-of-sequence token, else every token real.
// pad_token_id < 0: none.
torch::Tensor inferred_generation_mask(const torch::Tensor& input_ids, int64_t pad_token_id,
                                       const std::vector<int64_t>& eos_token_ids);

}  // namespace gemma4
