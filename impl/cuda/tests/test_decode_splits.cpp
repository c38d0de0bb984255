// choose_decode_splits (decode_splits.h) without a GPU: over the step sizes and GPUs the decode
// kernel meets, every plan covers its step's key tiles, leaves no split empty, stays within the
// split kernel's bounds and is the plan of least cost over every split count. The GPU tests
// (test_kv_cache.cpp, the decode category) see a few plans; a plan that dropped a step's last tiles
// would read too few keys only at sizes they do not run.
#include "impl/cuda/decode_splits.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gemma4::impl::cuda {
namespace {

// "" when the split kernel can run `p` for `tiles` key tiles a pair, else what is wrong with it.
// Split s reads tiles [s * per, min((s + 1) * per, tiles)) (decode_split_kernel.cuh).
std::string plan_error(const DecodeSplits& p, int64_t tiles) {
  const std::string what = std::to_string(p.splits) + " splits of " + std::to_string(p.tiles_per_split) + " tiles";
  if (p.splits < 1 || p.splits > kMaxDecodeSplits) return what + ": splits outside 1.." + std::to_string(kMaxDecodeSplits);
  if (tiles == 0) return p.splits == 1 ? "" : what + " for no tiles";
  if (int64_t(p.splits) * p.tiles_per_split < tiles) return what + " cover less than " + std::to_string(tiles);
  if (int64_t(p.splits - 1) * p.tiles_per_split >= tiles) return what + ": the last is empty";
  return "";
}

// Every split count tried, the first of the least cost (what the chooser's early stop must keep).
DecodeSplits exhaustive(int64_t tiles, int64_t pairs, int64_t slots) {
  DecodeSplits best{1, int(tiles)};
  int64_t best_cost = -1;
  for (int64_t s = 1; s <= std::min<int64_t>(tiles, kMaxDecodeSplits); ++s) {
    const int64_t cost = decode_split_cost(tiles, pairs, slots, s);
    if (cost >= 0 && (best_cost < 0 || cost < best_cost)) best = {int(s), int((tiles + s - 1) / s)}, best_cost = cost;
  }
  return best;
}

TEST(DecodeSplits, EveryPlanCoversItsTilesAndIsOfLeastCost) {
  // Key tiles a (batch, kv head) pair: every count to 300, then around powers of two and past the
  // split limit (a 32k cache at head dim 512 is 2048 tiles of 16 keys, 128k is 8192).
  std::vector<int64_t> tile_counts;
  for (int64_t t = 0; t <= 300; ++t) tile_counts.push_back(t);
  for (int64_t t : {511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097, 8191, 8192, 10000, 1 << 20}) {
    tile_counts.push_back(t);
  }
  // Pairs: batch x kv heads of the released geometries at batch 1 to 64, and more; slots: SM counts
  // (132 H100 SXM and H200, 114 H100 PCIe, 108 A100, 58 L4) at one and two CTAs an SM.
  const std::vector<int64_t> pair_counts{1, 2, 3, 4, 8, 16, 32, 64, 128, 132, 256, 1024, 4096};
  const std::vector<int64_t> slot_counts{58, 108, 114, 116, 132, 216, 228, 264};
  int plans = 0;
  for (int64_t tiles : tile_counts) {
    for (int64_t pairs : pair_counts) {
      for (int64_t slots : slot_counts) {
        const DecodeSplits plan = choose_decode_splits(tiles, pairs, slots), all = exhaustive(tiles, pairs, slots);
        ASSERT_EQ(plan_error(plan, tiles), "") << "tiles " << tiles << ", pairs " << pairs << ", slots " << slots;
        ASSERT_EQ(plan.splits, all.splits) << "the early stop changed the plan: tiles " << tiles << ", pairs " << pairs
                                           << ", slots " << slots;
        ++plans;
      }
    }
  }
  EXPECT_EQ(plans, 317 * 13 * 8);
}

TEST(DecodeSplits, LongCachesOfFewPairsSplitAndManyPairsDoNot) {
  // The cost model's intent, at the cases bench/README.md measures (132 SMs): a 32k global cache of
  // four pairs spreads over the SMs; 1024 pairs of 33 tiles fill them unsplit.
  const DecodeSplits few = choose_decode_splits(2048, 4, 132);
  EXPECT_GT(int64_t(few.splits) * 4, 66);
  EXPECT_LE(int64_t(few.splits) * 4, 132);
  EXPECT_EQ(choose_decode_splits(33, 1024, 264).splits, 1);
}

TEST(DecodeSplits, TheCheckCatchesABadPlan) {
  // Negative controls of plan_error: tiles per split rounded down (the last 3 of 2047 tiles never
  // read), one split too many (the last empty), and no split.
  EXPECT_NE(plan_error({4, 2047 / 4}, 2047), "");
  EXPECT_NE(plan_error({5, 3}, 12), "");
  EXPECT_NE(plan_error({0, 10}, 10), "");
  EXPECT_EQ(plan_error({4, 512}, 2047), "");
}

}  // namespace
}  // namespace gemma4::impl::cuda
