// The reference's routed-experts op against a per-token loop written from GEMMA4.md, on a shape
// no released or tiny config has: more experts than gate_up_proj rows (E > 2I). Every config in
// the goldens has 2I >= E, so reading the expert count from the wrong dimension would pass them.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "reference/layer_ops.h"

namespace gemma4 {
namespace {

TEST(LayerOps, MoeExpertsWithMoreExpertsThanGateUpRows) {
  const int64_t T = 5, H = 4, I = 2, E = 8, K = 2;
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({T, H}, torch::kFloat64);
  const torch::Tensor gate_up = torch::randn({E, 2 * I, H}, torch::kFloat64);
  const torch::Tensor down = torch::randn({E, H, I}, torch::kFloat64);
  // Every token routes to two distinct experts, among them the last one (E - 1 >= 2I).
  const torch::Tensor top_index = torch::tensor({7, 0, 3, 7, 5, 6, 7, 1, 2, 4}, torch::kInt64).view({T, K});
  const torch::Tensor top_weights = torch::rand({T, K}, torch::kFloat64);

  const torch::Tensor out = reference_layer_ops().moe_experts(x, top_index, top_weights, gate_up, down);

  torch::Tensor expected = torch::zeros({T, H}, torch::kFloat64);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = top_index[t][k].item<int64_t>();
      const torch::Tensor gu = at::matmul(gate_up[e], x[t]);  // [2I], gate half first
      const torch::Tensor act = at::gelu(gu.slice(0, 0, I), "tanh") * gu.slice(0, I, 2 * I);
      expected[t] += top_weights[t][k] * at::matmul(down[e], act);
    }
  }
  EXPECT_TRUE(torch::allclose(out, expected, 1e-12, 1e-12)) << (out - expected).abs().max();
}

}  // namespace
}  // namespace gemma4
