// The numeric faulty backends (impl/faulty/faulty_numeric_ops.cpp): each one's bug is real at the
// op level (its op differs from the reference's where the bug must show) and confined (it equals
// the reference's where the bug cannot show). Whether the suite catches them is calibrate's test.
#include <gtest/gtest.h>

#include <functional>

#include "impl/backend.h"
#include "reference/tests/test_support.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

using test::uniform;

// The reference op and the faulty one on the same inputs.
struct OpPair {
  Tensor reference, faulty;
};

OpPair attention(const std::string& name, int64_t Hq, int64_t Hkv, AttentionSpec spec, int64_t B = 2, int64_t S = 12,
                 int64_t D = 16) {
  const Tensor q = uniform({B, S, Hq, D}, 1), k = uniform({B, Hkv, S, D}, 2), v = uniform({B, Hkv, S, D}, 3);
  return {reference_layer_ops().attention(q, k, v, spec), find_backend(name).ops.attention(q, k, v, spec)};
}

OpPair qk_norm_rope(const std::string& name, const RopeParameters& rope, int64_t D) {
  const int64_t B = 2, S = 12, H = 2;
  const Tensor q = uniform({B, S, H, D}, 4), k = uniform({B, S, H, D}, 5), v = uniform({B, S, H, D}, 6);
  const Tensor norm = 1 + uniform({D}, 7, 0.5);
  const RopeTable table = rope_table(rope, D, S, torch::kFloat32, torch::kCPU);
  const QkvOutputs a = reference_layer_ops().qk_norm_rope(q, k, v, norm, norm, table, 1e-6);
  const QkvOutputs b = find_backend(name).ops.qk_norm_rope(q, k, v, norm, norm, table, 1e-6);
  return {at::cat({a.q.flatten(), a.k.flatten()}), at::cat({b.q.flatten(), b.k.flatten()})};
}

double difference(const OpPair& p) { return test::max_abs_diff(p.faulty, p.reference); }

const RopeParameters kDefault{"default", 1e4, 1.0, 1.0};
const RopeParameters kProportional{"proportional", 1e6, 0.25, 1.0};
const AttentionSpec kSliding4{LayerType::kSliding, 4, false, Tensor()};

Tensor left_padding(int64_t B, int64_t S, int64_t pad) {
  Tensor mask = torch::ones({B, S}, torch::kInt64);
  mask[B - 1].slice(0, 0, pad).zero_();
  return mask;
}

TEST(FaultyNumericBackends, AttentionScale) { EXPECT_GT(difference(attention("faulty-attention-scale", 4, 2, kSliding4)), 1e-2); }

TEST(FaultyNumericBackends, GeluExactIsSubtle) {
  const Tensor gate = uniform({2, 8, 64}, 8, 3.0), up = uniform({2, 8, 64}, 9);
  const double d = test::max_abs_diff(find_backend("faulty-gelu-exact").ops.geglu(gate, up), reference_layer_ops().geglu(gate, up));
  EXPECT_GT(d, 1e-4);  // far above fp32 rounding...
  EXPECT_LT(d, 2e-3);  // ...and about bf16's: the reason it declares below_reduced_precision
  EXPECT_TRUE(find_backend("faulty-gelu-exact").below_reduced_precision);
}

TEST(FaultyNumericBackends, RopeInterleaved) {
  EXPECT_GT(difference(qk_norm_rope("faulty-rope-interleaved", kDefault, 16)), 1e-2);
  EXPECT_GT(difference(qk_norm_rope("faulty-rope-interleaved", kProportional, 32)), 1e-2);
}

TEST(FaultyNumericBackends, ProportionalRopeBugsLeaveDefaultRopeAlone) {
  for (const char* name : {"faulty-proportional-rope-rotary-denominator", "faulty-proportional-rope-unpadded-pairs"}) {
    SCOPED_TRACE(name);
    EXPECT_GT(difference(qk_norm_rope(name, kProportional, 32)), 1e-2);
    EXPECT_GT(difference(qk_norm_rope(name, kProportional, 512)), 1e-2);  // the released global head dim
    EXPECT_EQ(difference(qk_norm_rope(name, kDefault, 16)), 0.0);
  }
}

TEST(FaultyNumericBackends, GqaTiledOnlyWhereHeadsAreGrouped) {
  EXPECT_GT(difference(attention("faulty-gqa-tiled-kv-heads", 4, 2, kSliding4)), 1e-2);
  EXPECT_EQ(difference(attention("faulty-gqa-tiled-kv-heads", 4, 1, kSliding4)), 0.0);  // MQA
  EXPECT_EQ(difference(attention("faulty-gqa-tiled-kv-heads", 4, 4, kSliding4)), 0.0);  // MHA
}

TEST(FaultyNumericBackends, PaddingIgnoredOnlyWithPadding) {
  const AttentionSpec padded{LayerType::kFull, 0, false, left_padding(2, 12, 4)};
  const OpPair p = attention("faulty-padding-ignored", 4, 2, padded);
  // The real positions of the padded row see padding keys; the unpadded row is untouched.
  EXPECT_GT(test::max_abs_diff(p.faulty[1].slice(0, 4), p.reference[1].slice(0, 4)), 1e-2);
  EXPECT_EQ(test::max_abs_diff(p.faulty[0], p.reference[0]), 0.0);
  EXPECT_EQ(difference(attention("faulty-padding-ignored", 4, 2, {LayerType::kFull, 0, false, Tensor()})), 0.0);
}

TEST(FaultyNumericBackends, WindowTooNarrowOnlyWhereTheWindowCuts) {
  EXPECT_GT(difference(attention("faulty-window-too-narrow", 4, 2, kSliding4)), 1e-2);
  // A window of S + 2 is S + 1 after the bug: still every key of a causal row.
  EXPECT_EQ(difference(attention("faulty-window-too-narrow", 4, 2, {LayerType::kSliding, 14, false, Tensor()})), 0.0);
}

TEST(FaultyNumericBackends, MoeGateUpSwapped) {
  const int64_t T = 10, H = 16, E = 4, I = 8, K = 2;
  const Tensor x = uniform({T, H}, 10), gate_up = uniform({E, 2 * I, H}, 11, 0.4), down = uniform({E, H, I}, 12, 0.4);
  const Tensor index = torch::randint(0, E, {T, K}, torch::kInt64), weights = torch::rand({T, K});
  const Tensor a = reference_layer_ops().moe_experts(x, index, weights, gate_up, down);
  const Tensor b = find_backend("faulty-moe-gate-up-swapped").ops.moe_experts(x, index, weights, gate_up, down);
  EXPECT_GT(test::max_abs_diff(a, b), 1e-3);
}

TEST(FaultyNumericBackends, AttentionSoftcapGrowsWithTheScores) {
  // tanh(s / 50) * 50 ~ s - s^3 / 7500: small scores barely move, large ones do.
  const double small = difference(attention("faulty-attention-softcap", 4, 2, kSliding4, 2, 12, 4));
  const double large = difference(attention("faulty-attention-softcap", 4, 2, kSliding4, 2, 12, 256));
  EXPECT_GT(small, 0.0);
  EXPECT_GT(large, 10 * small);
}

}  // namespace
}  // namespace gemma4::impl
