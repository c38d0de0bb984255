// The faulty backends of impl/faulty/faulty_model_ops.cpp: each replaces exactly the one part it
// names, its bug is real at that part (it differs from the reference's where the bug must show)
// and confined (equal where it cannot show). Whether the suite catches them is calibrate's test.
#include <gtest/gtest.h>

#include <limits>

#include "impl/backend.h"
#include "impl/faulty/faulty_backends.h"
#include "reference/tests/test_support.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

using test::uniform;

struct ReplacedCase {
  const char* backend;
  std::vector<std::string> parts;
};

TEST(FaultyModelOps, EachReplacesExactlyItsPart) {
  const ReplacedCase cases[] = {
      {"faulty-final-softcap-dropped", {"logit_softcap"}},
      {"faulty-embedding-scale-lost", {"scaled_embedding"}},
      {"faulty-router-not-renormalised", {"route"}},
      {"faulty-layer-scalar-dropped", {"scale_layer_output"}},
      {"faulty-no-key-row-nan", {"attention", "kv_cache"}},
      {"faulty-packed-rows-cross-attend", {"attention"}},
      {"faulty-norm-weight-grad-bf16", {"rms_norm"}},
  };
  for (const ReplacedCase& c : cases) EXPECT_EQ(replaced_parts(find_backend(c.backend)), c.parts) << c.backend;
}

TEST(FaultyModelOps, SoftcapDroppedOnlyMattersForLargeLogits) {
  const LayerOps& ref = reference_layer_ops();
  const LayerOps& bad = find_backend("faulty-final-softcap-dropped").ops;
  const Tensor small = torch::full({4}, 0.01), large = torch::full({4}, 60.0);
  EXPECT_TRUE(torch::allclose(ref.logit_softcap(small, 30.0), bad.logit_softcap(small, 30.0), 1e-6, 0));
  EXPECT_GT((bad.logit_softcap(large, 30.0) - ref.logit_softcap(large, 30.0)).abs().max().item<double>(), 30.0);
}

TEST(FaultyModelOps, EmbeddingScaleLostKeepsThePadRowFrozen) {
  const Tensor table = uniform({5, 4}, 1).requires_grad_(true), ids = torch::tensor({0, 2, 3}, torch::kInt64);
  const Tensor scale = torch::tensor(2.0);
  const Tensor ref = reference_layer_ops().scaled_embedding(table, ids, scale, 0);
  const Tensor bad = find_backend("faulty-embedding-scale-lost").ops.scaled_embedding(table, ids, scale, 0);
  EXPECT_TRUE(torch::allclose(ref, bad * 2));
  bad.sum().backward();
  EXPECT_EQ(table.grad()[0].abs().sum().item<double>(), 0.0);  // only the scale changed, not padding_idx
}

TEST(FaultyModelOps, RouterWithoutRenormalisationPicksTheSameExperts) {
  const Tensor logits = uniform({6, 16}, 2) * 3;
  const auto [ref_w, ref_i] = reference_layer_ops().route(logits, 4);
  const auto [bad_w, bad_i] = find_backend("faulty-router-not-renormalised").ops.route(logits, 4);
  EXPECT_TRUE(torch::equal(ref_i, bad_i));
  EXPECT_TRUE(torch::allclose(ref_w.sum(-1), torch::ones({6})));
  EXPECT_LT(bad_w.sum(-1).max().item<double>(), 0.999);
  EXPECT_TRUE(torch::allclose(ref_w, bad_w / bad_w.sum(-1, true)));
}

TEST(FaultyModelOps, LayerScalarDroppedIgnoresTheScalar) {
  const Tensor h = uniform({2, 3, 4}, 3), scalar = torch::tensor({0.25});
  EXPECT_TRUE(torch::allclose(reference_layer_ops().scale_layer_output(h, scalar), h * 0.25));
  EXPECT_TRUE(torch::equal(find_backend("faulty-layer-scalar-dropped").ops.scale_layer_output(h, scalar), h));
}

AttentionSpec global_spec(const Tensor& padding, const Tensor& segments = {}) {
  AttentionSpec spec;
  spec.type = LayerType::kFull;
  spec.padding = padding;
  spec.segments = segments;
  return spec;
}

TEST(FaultyModelOps, NoKeyRowIsNanOnlyThere) {
  const int64_t B = 2, S = 6, H = 2, D = 8;
  const Tensor q = uniform({B, S, H, D}, 4), k = uniform({B, H, S, D}, 5), v = uniform({B, H, S, D}, 6);
  Tensor padding = torch::ones({B, S}, torch::kInt64);
  padding.index_put_({0, torch::indexing::Slice(0, 2)}, 0);  // row 0 left-padded by 2: queries 0, 1 see no key
  const AttentionSpec spec = global_spec(padding);
  const Tensor ref = reference_layer_ops().attention(q, k, v, spec);
  const Tensor bad = find_backend("faulty-no-key-row-nan").ops.attention(q, k, v, spec);
  EXPECT_FALSE(ref.isnan().any().item<bool>());
  EXPECT_TRUE(bad[0].slice(0, 0, 2).isnan().all().item<bool>());
  EXPECT_TRUE(torch::allclose(ref[0].slice(0, 2), bad[0].slice(0, 2)));
  EXPECT_TRUE(torch::allclose(ref[1], bad[1]));
}

TEST(FaultyModelOps, PackedRowCrossAttendsOnlyAfterTheBoundary) {
  const int64_t B = 1, S = 8, H = 2, D = 8;
  const Tensor q = uniform({B, S, H, D}, 7), k = uniform({B, H, S, D}, 8), v = uniform({B, H, S, D}, 9);
  const Tensor positions = torch::tensor({0, 1, 2, 3, 0, 1, 2, 3}, torch::kInt64).unsqueeze(0);
  const AttentionSpec spec = global_spec(Tensor(), packed_sequences(positions, Tensor()));
  const Tensor ref = reference_layer_ops().attention(q, k, v, spec);
  const Tensor bad = find_backend("faulty-packed-rows-cross-attend").ops.attention(q, k, v, spec);
  EXPECT_TRUE(torch::allclose(ref.slice(1, 0, 4), bad.slice(1, 0, 4)));
  EXPECT_GT((ref.slice(1, 4) - bad.slice(1, 4)).abs().max().item<double>(), 1e-2);
}

// The bf16 running sum of the weight gradient: within a few bf16 spacings over 16 tokens, off by
// far more over 4096 (the real goldens' B x S), while the input gradient stays the reference's.
TEST(FaultyModelOps, NormWeightGradientStallsOnlyOverManyTokens) {
  const auto weight_grad_error = [](int64_t tokens) {
    const Tensor x = uniform({tokens, 16}, 10), dy = uniform({tokens, 16}, 11);
    const Tensor w = (uniform({16}, 12) * 0.5 + 1).requires_grad_(true);
    const Tensor wb = w.detach().clone().requires_grad_(true);
    const Tensor xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
    (reference_layer_ops().rms_norm(xa, w, 1e-6) * dy).sum().backward();
    (find_backend("faulty-norm-weight-grad-bf16").ops.rms_norm(xb, wb, 1e-6) * dy).sum().backward();
    EXPECT_TRUE(torch::allclose(xa.grad(), xb.grad(), 1e-5, 1e-6));
    return ((wb.grad() - w.grad()).abs().max() / w.grad().abs().max()).item<double>();
  };
  const double few = weight_grad_error(16), many = weight_grad_error(4096);
  EXPECT_LT(few, 2e-2);
  EXPECT_GT(many, 10 * few);
}

}  // namespace
}  // namespace gemma4::impl
