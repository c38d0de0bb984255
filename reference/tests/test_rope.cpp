// RoPE tables: default and proportional (partial rotary with the full head dim as denominator).
#include <gtest/gtest.h>

#include <cmath>

#include "reference/ops.h"

namespace gemma4 {
namespace {

TEST(Rope, DefaultInverseFrequencies) {
  const RopeParameters rope{"default", 10000.0, 1.0, 1.0};
  const torch::Tensor inv = rope_inv_freq(rope, 8);
  ASSERT_EQ(inv.numel(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(inv[i].item<float>(), static_cast<float>(std::pow(1e4, -2.0 * i / 8)));
}

TEST(Rope, ProportionalRotatesAFractionWithFullDenominator) {
  // GEMMA4.md, Forward 3: a = int(0.25 * 512 // 2) = 64 rotating pairs, theta^(-2i/512), rest 0.
  const RopeParameters rope{"proportional", 1e6, 0.25, 1.0};
  const torch::Tensor inv = rope_inv_freq(rope, 512);
  ASSERT_EQ(inv.numel(), 256);
  for (int i : {0, 1, 17, 63}) {
    EXPECT_FLOAT_EQ(inv[i].item<float>(), static_cast<float>(std::pow(1e6, -2.0 * i / 512))) << i;
  }
  EXPECT_EQ(inv.slice(0, 64).count_nonzero().item<int64_t>(), 0);
}

TEST(Rope, ProportionalFactorDividesFrequencies) {
  const torch::Tensor plain = rope_inv_freq({"proportional", 1e6, 0.5, 1.0}, 16);
  const torch::Tensor scaled = rope_inv_freq({"proportional", 1e6, 0.5, 4.0}, 16);
  EXPECT_TRUE(torch::allclose(scaled * 4, plain));
}

TEST(Rope, NonRotatedDimsPassThrough) {
  const RopeTable t = rope_table({"proportional", 1e6, 0.25, 1.0}, 16, 9, torch::kFloat32, torch::kCPU);
  // Pairs 2..7 of each half do not rotate: cos 1, sin 0 at every position.
  for (int64_t d : {2, 5, 7, 10, 13, 15}) {
    EXPECT_TRUE(torch::equal(t.cos.select(1, d), torch::ones({9}))) << d;
    EXPECT_TRUE(torch::equal(t.sin.select(1, d), torch::zeros({9}))) << d;
  }
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({1, 9, 2, 16});
  const torch::Tensor y = apply_rope(x, t);
  EXPECT_TRUE(torch::equal(y.slice(-1, 2, 8), x.slice(-1, 2, 8)));
  EXPECT_FALSE(torch::equal(y.slice(-1, 0, 2), x.slice(-1, 0, 2)));
}

TEST(Rope, RotationMatchesTheFormula) {
  const int64_t D = 8, S = 5;
  const RopeParameters rope{"default", 10000.0, 1.0, 1.0};
  const RopeTable t = rope_table(rope, D, S, torch::kFloat64, torch::kCPU);
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({1, S, 1, D}, torch::kFloat64);
  const torch::Tensor y = apply_rope(x, t);
  for (int64_t p = 0; p < S; ++p) {
    for (int64_t i = 0; i < D / 2; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / D);
      const double a = x[0][p][0][i].item<double>(), b = x[0][p][0][i + D / 2].item<double>();
      // rotate_half pairs dim i with dim i + D/2.
      EXPECT_NEAR(y[0][p][0][i].item<double>(), a * std::cos(angle) - b * std::sin(angle), 1e-6);
      EXPECT_NEAR(y[0][p][0][i + D / 2].item<double>(), b * std::cos(angle) + a * std::sin(angle), 1e-6);
    }
  }
}

TEST(Rope, PositionZeroIsIdentity) {
  const RopeTable t = rope_table({"default", 1e4, 1.0, 1.0}, 8, 1, torch::kFloat32, torch::kCPU);
  const torch::Tensor x = torch::randn({2, 1, 3, 8});
  EXPECT_TRUE(torch::equal(apply_rope(x, t), x));
}

}  // namespace
}  // namespace gemma4
