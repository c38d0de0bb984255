// The fp8 KV cache's pieces, apart from the decode checks that judge it whole: e4m3's encoding and
// scales (reference/kv_quantization.h), the truth's cache (quantize_on_write), and the in-tree fp8
// cache (impl/variants/fp8_kv_cache.cpp) holding exactly what the truth's holds while its ring
// wraps, and not once a faulty cache's one change is made.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "impl/faulty/faulty_backends.h"
#include "impl/variants/fp8_kv_cache.h"
#include "reference/kv_quantization.h"

namespace gemma4 {
namespace {

using torch::Tensor;

TEST(Fp8Encoding, RoundsToNearestAndSaturatesAt448) {
  const Tensor one = at::ones({1}, torch::kFloat32);
  // e4m3 near 1 has steps of 1/8: 1.0625 is a tie (to even: 1.0), 1.07 rounds up to 1.125.
  const Tensor x = at::tensor({1.0f, 1.0625f, 1.07f, 500.0f, -1000.0f, 0.0f});
  const Tensor got = fp8_decode(fp8_encode(x, one), one, torch::kFloat32);
  EXPECT_TRUE(at::equal(got, at::tensor({1.0f, 1.0f, 1.125f, 448.0f, -448.0f, 0.0f}))) << got;
}

TEST(Fp8Encoding, ScalesTakeTheAmaxOfTheirGroup) {
  Tensor x = at::zeros({2, 3, 4, 8});
  x[1][2][3][5] = -896.0f;  // head 2, entry (1, 3)
  x[0][0][0][0] = 44.8f;    // head 0, entry (0, 0)
  const float tiny = std::numeric_limits<float>::min() / kE4m3Max;
  EXPECT_FLOAT_EQ(fp8_scales(x, KvQuantization::kFp8PerTensor).item<float>(), 2.0f);
  const Tensor head = fp8_scales(x, KvQuantization::kFp8PerHead);
  EXPECT_EQ(head.sizes(), (std::vector<int64_t>{1, 3, 1, 1}));
  EXPECT_FLOAT_EQ(head[0][0][0][0].item<float>(), 0.1f);
  EXPECT_FLOAT_EQ(head[0][1][0][0].item<float>(), tiny);  // all zero: never a scale of 0
  EXPECT_FLOAT_EQ(head[0][2][0][0].item<float>(), 2.0f);
  const Tensor token = fp8_scales(x, KvQuantization::kFp8PerToken);
  EXPECT_EQ(token.sizes(), (std::vector<int64_t>{2, 3, 4, 1}));
  EXPECT_FLOAT_EQ(token[1][2][3][0].item<float>(), 2.0f);
}

// Steps of k/v [1, 2, c, 16] through `ops` (a sliding layer of window 4), its contents after each.
std::vector<CacheContents> feed(const KvCacheOps& ops, const std::vector<int64_t>& steps, double grow = 1.0) {
  at::manual_seed(3);
  const CacheSpec spec{0, LayerType::kSliding, 1, 2, 16, 4, 64, torch::kFloat32, torch::kCPU, 0, 32};
  const std::unique_ptr<LayerKvCache> cache = ops.make(spec);
  std::vector<CacheContents> out;
  int64_t start = 0;
  double size = 1.0;
  for (int64_t n : steps) {
    ops.update(*cache, at::randn({1, 2, n, 16}) * size, at::randn({1, 2, n, 16}) * size, start);
    out.push_back(ops.contents(*cache));
    start += n, size *= grow;
  }
  return out;
}

const std::vector<int64_t> kSteps{5, 5, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // the ring of 4 slots wraps twice

void expect_same_entries(const std::vector<CacheContents>& a, const std::vector<CacheContents>& b, bool same) {
  bool all_equal = true;
  for (size_t s = 0; s < a.size(); ++s) {
    // The fp8 cache keeps what the step's queries may see; the reference's contiguous cache at least that.
    const int64_t n = a[s].k.size(2), skip = a[s].first - b[s].first;
    ASSERT_GE(skip, 0);
    all_equal &= at::equal(a[s].k, b[s].k.narrow(2, skip, n)) && at::equal(a[s].v, b[s].v.narrow(2, skip, n));
  }
  EXPECT_EQ(all_equal, same);
}

TEST(Fp8KvCache, HoldsWhatTheQuantizedReferenceCacheHoldsWhileItsRingWraps) {
  for (KvQuantization q : {KvQuantization::kFp8PerTensor, KvQuantization::kFp8PerHead, KvQuantization::kFp8PerToken}) {
    SCOPED_TRACE(kv_quantization_name(q));
    expect_same_entries(feed(impl::fp8_kv_cache_ops(q), kSteps), feed(quantize_on_write(reference_kv_cache_ops(), q), kSteps),
                        true);
  }
}

TEST(Fp8KvCache, StaticScalesSaturateWhatComesLaterAndPerTokenScalesDoNot) {
  const std::vector<int64_t> steps{4, 1, 1};  // each step 100x the last
  const auto largest = [](const std::vector<CacheContents>& c) { return c.back().k.abs().max().item<double>(); };
  const double per_head = largest(feed(quantize_on_write(reference_kv_cache_ops(), KvQuantization::kFp8PerHead), steps, 100));
  const double per_token = largest(feed(quantize_on_write(reference_kv_cache_ops(), KvQuantization::kFp8PerToken), steps, 100));
  EXPECT_LT(per_head, 10.0);    // the prompt's scale: 448 codes of about amax/448
  EXPECT_GT(per_token, 1000.0);  // 10^4-sized entries kept
}

TEST(Fp8KvCache, TheRingScalesFaultDiffersOnlyOnceTheRingWraps) {
  impl::Fp8KvCacheHooks hooks;
  hooks.scale_slots = [](const Tensor& slots) { return at::arange(slots.size(0), slots.options()); };
  const KvCacheOps faulty = impl::fp8_kv_cache_ops(KvQuantization::kFp8PerToken, hooks);
  const KvCacheOps truth = quantize_on_write(reference_kv_cache_ops(), KvQuantization::kFp8PerToken);
  expect_same_entries(feed(faulty, {5}), feed(truth, {5}), true);  // one step: nothing wrapped
  expect_same_entries(feed(faulty, kSteps), feed(truth, kSteps), false);
}

}  // namespace
}  // namespace gemma4
