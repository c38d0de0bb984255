#pragma once
// How decode attention splits a step's key tiles over CTAs (plan_decode_attention in
// decode_attention.cu): a pure function of the step's size and the GPU's CTA slots, apart from the
// device queries, so that a test without a GPU holds every plan to what the split kernel assumes
// (tests/test_decode_splits.cpp): split s reads tiles [s * per, min((s + 1) * per, tiles)), so the
// splits must cover every tile, and none should be empty (a CTA and a combine input for nothing).
#include <algorithm>
#include <cstdint>

namespace gemma4::impl::cuda {

constexpr int64_t kMaxDecodeSplits = 4096;

struct DecodeSplits {
  int splits = 1;
  int tiles_per_split = 0;
};

// The cost of `s` splits in CTA "tile-times" over the waves they make: a CTA of t tiles costs about
// t + 2 (its pipeline's fill and its epilogue), a wave is `slots` CTAs (every SM's:
// plan_decode_attention says how many an SM), and a second kernel costs about 2 more. -1 where s
// splits make the same chunks as fewer (the last would be empty). `tiles`: key tiles a pair, > 0.
inline int64_t decode_split_cost(int64_t tiles, int64_t pairs, int64_t slots, int64_t s) {
  const int64_t per = (tiles + s - 1) / s;
  if ((tiles + per - 1) / per != s) return -1;
  const int64_t waves = (pairs * s + slots - 1) / slots;
  return waves * (per + 2) + (s > 1 ? 2 : 0);
}

// The fewest tile-times (the first such s): long caches of few (batch, kv head) pairs split wide,
// many pairs do not split. `tiles`: key tiles a pair (0: none, one split). The search stops once no
// larger s can cost less: cost(s) >= (pairs s / slots)(tiles / s + 2) = (pairs tiles + 2 pairs s) /
// slots, which grows with s (it runs once a decode step a layer: a 32k cache took 2048 trials).
inline DecodeSplits choose_decode_splits(int64_t tiles, int64_t pairs, int64_t slots) {
  DecodeSplits best;
  best.tiles_per_split = int(std::max<int64_t>(tiles, 0));
  int64_t best_cost = -1;
  slots = std::max<int64_t>(slots, 1);
  for (int64_t s = 1; s <= std::min<int64_t>(tiles, kMaxDecodeSplits); ++s) {
    if (best_cost >= 0 && pairs * tiles + 2 * pairs * s >= best_cost * slots) break;
    const int64_t cost = decode_split_cost(tiles, pairs, slots, s);
    if (cost >= 0 && (best_cost < 0 || cost < best_cost)) {
      best_cost = cost;
      best.splits = int(s);
      best.tiles_per_split = int((tiles + s - 1) / s);
    }
  }
  return best;
}

}  // namespace gemma4::impl::cuda
