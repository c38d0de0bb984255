#pragma once
// Decode goldens (golden/FORMAT.md, "Decode goldens"): transformers' greedy generation of a tiny
// checkpoint, with the logits of every step and what each storing layer's cache held after the
// prompt. The file sits in the case's directory, beside the checkpoint it was made with.
#include <torch/types.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "golden/golden_file.h"
#include "golden/verify.h"
#include "reference/generate.h"
#include "reference/kv_sharing.h"

namespace gemma4::golden {

struct DecodeGolden {
  std::string path, name, description, generator;
  std::string case_dir;  // the directory of the file: config.json and the checkpoint
  // stored: the checkpoint in case_dir; generated or constructed (golden/real/): the weights for
  // `seed` (FORMAT.md, "Real-size goldens"); checkpoint: the directory its attribute names (case_dir).
  WeightsMode weights_mode = WeightsMode::kStored;
  uint64_t seed = 0;
  nlohmann::json config;
  int64_t max_new_tokens = 0;
  KvKeyConvention kv_key = KvKeyConvention::kLayerType;
  torch::Tensor input_ids, attention_mask;  // [B, S] int64
  torch::Tensor sequences;                  // [B, S + N] int64: the prompt, then generate's tokens
  // "scores" [N, B, V] and, per storing layer L, "cache/layers.<L>.keys" and ".values" [B, Hkv, T, D].
  TensorMap expected;
  TensorMap judged;                    // "cache/..." [B, 1, T, 1]: 0 at padding entries (don't-care)
  std::map<int, int64_t> cache_first;  // layer -> the token index of its entry 0
  int64_t prompt_length() const { return input_ids.size(1); }
};

// The layer of a cache dataset name ("cache/layers.12.keys" -> 12); -1 for any other name.
int cache_layer(const std::string& name);

// True when the file's root attribute `kind` is "decode" (false for other goldens and non-goldens).
bool is_decode_golden(const std::string& path);
// Reads and checks a decode golden: throws gemma4::Error naming the file and what is wrong.
DecodeGolden read_decode_golden(const std::string& path);

// The model a decode golden was made with, in `dtype` on `device`: its checkpoint, or its
// generated weights.
Model decode_model(const DecodeGolden& golden, torch::ScalarType dtype, const torch::Device& device);

// The golden's sequences fed through `model` with `options` (its ops, cache ops and prefill
// chunk), teacher-forced (reference/generate.h decode_logits): "scores", the logits each new token
// was chosen from, and the prompt caches cut to the golden's entries, named as in `expected`. A
// cache that no longer holds an entry the golden has throws gemma4::Error naming the layer.
// With `drafts`, the new tokens come as speculative drafts (speculative_logits): scores only.
TensorMap decode_candidate(const DecodeGolden& golden, const Model& model, const gemma4::GenerateOptions& options,
                           const std::vector<Draft>* drafts = nullptr);

// golden verify of a decode file, on `device` in f32 with the reference: teacher-forced scores and
// caches (prompt in one piece, and in chunks of 5) under check_fp32, and generate's own tokens,
// cached and uncached, equal to the golden's sequences.
VerifyReport verify_decode_golden(const DecodeGolden& golden, const torch::Device& device);

}  // namespace gemma4::golden
