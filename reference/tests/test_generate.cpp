// Incremental decoding (reference/generate.h): with a cache, without one and with the prompt fed
// in chunks, greedy generation gives the same tokens and logits, on the E2B-like miniature (KV
// sharing, PLE, a window of 4 that the prompt outgrows) with a left- and a right-padded row.
// transformers' own generation is the decode goldens' business (golden/transformers).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/generate.h"
#include "reference/tests/test_support.h"
#include "reference/weights.h"

namespace gemma4 {
namespace {

struct Prompt {
  torch::Tensor ids, mask;
};

Prompt padded_prompt() {
  torch::Tensor ids = at::randint(2, 64, {3, 11}, torch::TensorOptions().dtype(torch::kInt64));
  torch::Tensor mask = at::ones({3, 11}, torch::kInt64);
  mask.index_put_({0, at::indexing::Slice(0, 3)}, 0);   // left padding
  mask.index_put_({1, at::indexing::Slice(8, 11)}, 0);  // right padding
  return {ids, mask};
}

class Generate : public ::testing::Test {
 protected:
  Config config = parse_config(test::tiny_shared_kv_config());
  Model model{config, random_weights(config, 7, torch::kFloat32, torch::kCPU)};
};

TEST_F(Generate, CacheNoCacheAndChunkedPrefillAgree) {
  torch::manual_seed(3);
  const Prompt p = padded_prompt();
  GenerateOptions options;
  options.max_new_tokens = 6;
  const GenerateOutputs cached = generate(model, p.ids, p.mask, options);
  options.prefill_chunk = 3;  // shorter than the window
  const GenerateOutputs chunked = generate(model, p.ids, p.mask, options);
  options.prefill_chunk = 0;
  options.use_cache = false;
  const GenerateOutputs full = generate(model, p.ids, p.mask, options);

  ASSERT_EQ(cached.sequences.sizes(), (std::vector<int64_t>{3, 17}));
  ASSERT_EQ(cached.scores.sizes(), (std::vector<int64_t>{6, 3, 64}));
  EXPECT_TRUE(at::equal(cached.sequences, full.sequences));
  EXPECT_TRUE(at::equal(chunked.sequences, full.sequences));
  // f32; the cache and the full forward attend over differently shaped score matrices.
  const double cache_error = (cached.scores - full.scores).abs().max().item<double>();
  const double chunk_error = (chunked.scores - full.scores).abs().max().item<double>();
  std::cout << "max |cached - full| " << cache_error << ", |chunked - full| " << chunk_error << "\n";
  EXPECT_LT(cache_error, 1e-4);
  EXPECT_LT(chunk_error, 1e-4);
  // A sliding cache holds what the next query can see: at least window - 1 entries, ending at the prompt's end.
  for (const auto& [layer, contents] : cached.prompt_caches) {
    EXPECT_EQ(contents.first + contents.k.size(2), 11) << "layer " << layer;
    if (config.layers[layer].type == LayerType::kSliding) EXPECT_GE(contents.k.size(2), config.sliding_window - 1);
  }
  EXPECT_EQ(cached.prompt_caches.count(3), 0u) << "a KV-shared layer owns no cache";
}

// The negative control: a cache that drops one key too many (the +1 family) changes the result.
TEST_F(Generate, ACacheThatForgetsAKeyChangesTheLogits) {
  torch::manual_seed(3);
  const Prompt p = padded_prompt();
  KvCacheOps forgetful = reference_kv_cache_ops();
  forgetful.make = [](const CacheSpec& spec) {
    CacheSpec shorter = spec;
    if (shorter.window > 0) shorter.window -= 1;
    return reference_kv_cache_ops().make(shorter);
  };
  GenerateOptions options;
  options.max_new_tokens = 4;
  const GenerateOutputs right = generate(model, p.ids, p.mask, options);
  options.cache_ops = &forgetful;
  const GenerateOutputs wrong = generate(model, p.ids, p.mask, options);
  EXPECT_GT((right.scores - wrong.scores).abs().max().item<double>(), 1e-2);
}

TEST_F(Generate, PositionsAndMasksFollowTransformers) {
  const torch::Tensor mask = torch::tensor({0, 0, 1, 1, 1, 1, 0}, torch::kInt64).view({1, 7});
  EXPECT_TRUE(at::equal(generation_positions(mask), torch::tensor({0, 0, 0, 1, 2, 3, 0}, torch::kInt64).view({1, 7})));
  const torch::Tensor ids = torch::tensor({5, 0, 7}, torch::kInt64).view({1, 3});
  EXPECT_TRUE(at::equal(inferred_generation_mask(ids, 0, {1}), torch::tensor({1, 0, 1}, torch::kInt64).view({1, 3})));
  EXPECT_TRUE(at::equal(inferred_generation_mask(ids, 0, {0}), at::ones({1, 3}, torch::kInt64)));  // pad is eos
  EXPECT_TRUE(at::equal(inferred_generation_mask(ids, 9, {1}), at::ones({1, 3}, torch::kInt64)));  // no pad
}

TEST_F(Generate, BadRequestsAreErrors) {
  const Prompt p = padded_prompt();
  GenerateOptions options;
  options.max_new_tokens = 0;
  EXPECT_THROW(generate(model, p.ids, p.mask, options), Error);
  options.max_new_tokens = 1;
  EXPECT_THROW(generate(model, p.ids, p.mask.slice(1, 1), options), Error);
  DecodeState state = model.start_decode(3, 4, reference_kv_cache_ops());
  EXPECT_THROW(model.decode(state, p.ids, generation_positions(p.mask), p.mask, nullptr), Error);  // past capacity
}

// Speculative decoding: drafts of one accepted token are plain decoding, bit for bit; longer
// drafts with rejected guesses agree within fp32 rounding, also when the sliding cache (window 4
// in this config) has dropped keys between drafts; a rollback that forgets to drop the guesses
// (the negative control) changes the logits.
TEST_F(Generate, SpeculativeDraftsAgreeWithPlainDecoding) {
  torch::manual_seed(5);
  const Prompt p = padded_prompt();
  const torch::Tensor tokens = at::cat({p.ids, at::randint(2, 64, {3, 8}, p.ids.options())}, 1);
  const torch::Tensor plain = decode_logits(model, tokens, p.mask, 11, {});
  const std::vector<Draft> singles(8, Draft{1, 1});
  EXPECT_TRUE(at::equal(speculative_logits(model, tokens, p.mask, 11, {}, singles), plain));
  const std::vector<Draft> drafts{{3, 2}, {4, 1}, {2, 2}, {5, 3}};
  const torch::Tensor speculative = speculative_logits(model, tokens, p.mask, 11, {}, drafts);
  const torch::Tensor real = at::cat({p.mask, at::ones({3, 8}, torch::kInt64)}, 1).to(torch::kBool);
  const double error = (speculative - plain).abs().amax(-1).masked_select(real).max().item<double>();
  std::cout << "max |speculative - plain| over real tokens " << error << "\n";
  EXPECT_LT(error, 1e-4);

  KvCacheOps keeps_guesses = reference_kv_cache_ops();
  keeps_guesses.rollback = [](LayerKvCache&, int64_t) {};
  keeps_guesses.update = [](LayerKvCache& cache, const torch::Tensor& k, const torch::Tensor& v, int64_t) {
    const CacheContents held = reference_kv_cache_ops().contents(cache);
    const int64_t end = held.k.defined() ? held.first + held.k.size(2) : 0;
    reference_kv_cache_ops().update(cache, k, v, end);  // appended after the guesses
  };
  keeps_guesses.attention = [](const torch::Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
    CacheContents held = reference_kv_cache_ops().contents(cache);  // the guesses count as the newest context
    const int64_t surplus = std::max<int64_t>(0, held.k.size(2) - (spec.start + q.size(1)));
    held = {held.k.slice(2, surplus), held.v.slice(2, surplus), 0};
    held.first = spec.start + q.size(1) - held.k.size(2);
    return attend_entries(q, held, spec);
  };
  GenerateOptions wrong;
  wrong.cache_ops = &keeps_guesses;
  const torch::Tensor bad = speculative_logits(model, tokens, p.mask, 11, wrong, drafts);
  EXPECT_GT((bad - plain).abs().amax(-1).masked_select(real).max().item<double>(), 1e-2);
}

TEST_F(Generate, RollbackRequestsOutOfRangeAreErrorsNamingTheLimit) {
  const Prompt p = padded_prompt();
  DecodeState state = model.start_decode(3, 20, reference_kv_cache_ops(), KvKeyConvention::kLayerType, 2);
  model.decode(state, p.ids, generation_positions(p.mask), p.mask, nullptr);
  EXPECT_THROW(model.rollback(state, 3), Error);  // more than max_rollback
  model.rollback(state, 2);
  EXPECT_EQ(state.length, 9);
  try {
    model.rollback(state, 1);  // a second rollback before the next step
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_rollback 2"), std::string::npos) << e.what();
  }
  KvCacheOps no_rollback = reference_kv_cache_ops();
  no_rollback.rollback = nullptr;
  EXPECT_THROW(model.start_decode(3, 20, no_rollback, KvKeyConvention::kLayerType, 2), Error);
  EXPECT_THROW(speculative_logits(model, p.ids, p.mask.slice(1, 0, 9), 9, {}, {Draft{2, 0}}), Error);
}

}  // namespace
}  // namespace gemma4
