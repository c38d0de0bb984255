// Candidate files judged against committed goldens (golden/FORMAT.md, "Candidate files"): what is
// required, what may be left out ("not checked", never "pass"), and every way a candidate is
// refused by name. The candidates are built from the golden's own expected/ and then changed one
// thing at a time.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "golden/candidate.h"
#include "golden/h5_tensors.h"
#include "golden/model_cases.h"
#include "golden/tests/test_files.h"

namespace gemma4::golden {
namespace {

using torch::Tensor;

GoldenCase committed(const std::string& name) {
  return read_golden(std::string(GEMMA4_SOURCE_DIR) + "/golden/reference/" + name);
}

// The golden's expected/ datasets whose names start with one of `prefixes` ("" keeps all).
TensorMap expected_subset(const GoldenCase& g, const std::vector<std::string>& prefixes) {
  TensorMap out;
  for (const auto& [name, t] : g.expected) {
    for (const std::string& p : prefixes) {
      if (name.compare(0, p.size(), p) == 0) out[name] = t.clone();
    }
  }
  return out;
}

const TensorCheck& row(const VerifyReport& r, const std::string& name) {
  for (const TensorCheck& c : r.checks) {
    if (c.name == name) return c;
  }
  throw std::runtime_error("no row " + name);
}

TEST(Candidate, TheGoldensOwnOutputsPass) {
  for (const char* file : {"model/e2b.f32.h5", "model/e2b.bf16.h5", "op/attention-sliding-padded.f16.h5"}) {
    SCOPED_TRACE(file);
    const GoldenCase g = committed(file);
    const VerifyReport r = check_candidate(g, expected_subset(g, {""}), CandidateScope::kForwardAndBackward);
    EXPECT_TRUE(r.pass());
    EXPECT_EQ(r.not_checked(), 0);
  }
}

// Rounding the way a legitimate fp32 implementation might (one ulp-scale change everywhere) passes;
// one logit off by 0.5 fails.
TEST(Candidate, RoundingPassesAPerturbedLogitFails) {
  const GoldenCase g = committed("model/e2b.f32.h5");
  TensorMap c = expected_subset(g, {""});
  for (auto& [name, t] : c) t = t * (1 + 1e-7);
  EXPECT_TRUE(check_candidate(g, c, CandidateScope::kForwardAndBackward).pass());
  c.at("outputs/logits")[0][3][5] += 0.5;
  const VerifyReport r = check_candidate(g, c, CandidateScope::kForwardAndBackward);
  EXPECT_FALSE(r.pass());
  EXPECT_EQ(r.failures(), 1);
  EXPECT_TRUE(row(r, "outputs/logits").failed());
}

TEST(Candidate, ForwardOnlyLeavesGradientsNotChecked) {
  const GoldenCase g = committed("model/e2b.f32.h5");
  const TensorMap logits = expected_subset(g, {"outputs/logits"});
  const VerifyReport fwd = check_candidate(g, logits, CandidateScope::kForwardOnly);
  EXPECT_TRUE(fwd.pass());
  EXPECT_EQ(fwd.not_checked(), int(g.expected.size()) - 1);
  const TensorCheck& grad = row(fwd, "grads/norm.weight");
  EXPECT_FALSE(grad.checked);
  EXPECT_FALSE(grad.pass());  // not checked is never pass
  EXPECT_FALSE(row(fwd, "outputs/loss").checked);

  const VerifyReport full = check_candidate(g, logits, CandidateScope::kForwardAndBackward);
  EXPECT_FALSE(full.pass());
  EXPECT_TRUE(row(full, "outputs/loss").failed());
  EXPECT_NE(row(full, "grads/norm.weight").problem.find("required unless --forward-only"), std::string::npos);
  EXPECT_FALSE(row(full, "outputs/hidden_states/3").checked);  // intermediates stay optional
}

TEST(Candidate, LogitsAreAlwaysRequired) {
  const GoldenCase g = committed("model/e2b.f32.h5");
  TensorMap c = expected_subset(g, {""});
  c.erase("outputs/logits");
  const VerifyReport r = check_candidate(g, c, CandidateScope::kForwardOnly);
  EXPECT_FALSE(r.pass());
  EXPECT_EQ(row(r, "outputs/logits").problem, "not in the candidate");
}

// An op golden's outputs are the whole point: none of them is optional.
TEST(Candidate, OpOutputsAreRequired) {
  const GoldenCase g = committed("op/mlp-geglu.f32.h5");
  const VerifyReport r = check_candidate(g, expected_subset(g, {"grads/"}), CandidateScope::kForwardAndBackward);
  EXPECT_FALSE(r.pass());
  EXPECT_TRUE(row(r, "outputs/y").failed());
}

TEST(Candidate, UnknownIntegerMisShapedAndNonFiniteDatasetsFailByName) {
  const GoldenCase g = committed("model/e2b.f32.h5");
  const TensorMap good = expected_subset(g, {""});
  struct Damage {
    const char* what;
    std::string dataset;
    std::function<void(TensorMap&)> apply;
    std::string problem;  // "" when the verdict (not a problem) fails the row
  };
  const std::vector<Damage> damages = {
      {"unknown", "outputs/logit", [](TensorMap& c) { c["outputs/logit"] = torch::zeros({2}); },
       "unknown dataset: the golden has no expected/outputs/logit"},
      {"integer", "outputs/loss", [](TensorMap& c) { c["outputs/loss"] = torch::zeros({}, torch::kInt64); },
       "not floating point (Long)"},
      {"mis-shaped", "outputs/logits",
       [](TensorMap& c) { c["outputs/logits"] = c["outputs/logits"].transpose(0, 1).contiguous(); }, "shape"},
      // NaN at a don't-care position (a padded query row, judged/ = 0) still fails.
      {"non-finite", "outputs/logits", [](TensorMap& c) { c["outputs/logits"][1][0][0] = NAN; }, ""},
  };
  ASSERT_EQ(g.judged.at("outputs/logits")[1][0][0].item<int64_t>(), 0) << "position [1, 0] is meant to be padding";
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    TensorMap c = good;
    d.apply(c);
    const VerifyReport r = check_candidate(g, c, CandidateScope::kForwardAndBackward);
    EXPECT_FALSE(r.pass());
    EXPECT_EQ(r.failures(), 1);
    const TensorCheck& bad = row(r, d.dataset);
    EXPECT_TRUE(bad.failed());
    if (d.problem.empty()) {
      EXPECT_GT(bad.verdict.non_finite, 0);
    } else {
      EXPECT_EQ(bad.problem.rfind(d.problem, 0), 0u) << bad.problem;
    }
  }
}

TEST(Candidate, ReadsNestedDatasetsAndRefusesDamagedFilesByName) {
  const std::string path = test::temp_path("candidate.h5");
  {
    h5::File f = h5::File::create(path);
    f.write("outputs/logits", torch::ones({1, 2, 3}));
    f.write("grads/layers.0.mlp.up_proj.weight", torch::ones({4}));
  }
  const TensorMap c = read_candidate(path);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.count("outputs/logits") && c.count("grads/layers.0.mlp.up_proj.weight"));
  const std::string text = test::temp_path("not_hdf5.h5");
  std::ofstream(text) << "logits = [1, 2, 3]\n";
  EXPECT_NE(test::error_of([&] { read_candidate(text); }).find(text), std::string::npos);
  EXPECT_NE(test::error_of([&] { read_candidate(path + ".missing"); }).find(path + ".missing"), std::string::npos);
}

// The pad token's embedding row (FORMAT.md, "Implementation-defined values"): a transformers case
// puts the pad id at one real position, so a port without padding_idx trains that row from there.
// Its row 0 is don't-care; the same change on any other row still fails.
TEST(Candidate, ThePadRowOfTheEmbeddingGradientIsDontCareOtherRowsAreJudged) {
  const GoldenCase g =
      read_golden(std::string(GEMMA4_SOURCE_DIR) + "/golden/transformers/dense_keqv/golden.f32.h5");
  ASSERT_EQ(g.judged.count("grads/embed_tokens.weight"), 1u);
  TensorMap c = expected_subset(g, {""});
  Tensor& grad = c.at("grads/embed_tokens.weight");
  const double scale = grad.abs().max().item<double>();
  grad[0] += scale;  // the pad row, trained from its real position
  EXPECT_TRUE(check_candidate(g, c, CandidateScope::kForwardAndBackward).pass());
  grad[1] += scale;  // a real token's row
  const VerifyReport r = check_candidate(g, c, CandidateScope::kForwardAndBackward);
  EXPECT_FALSE(r.pass());
  EXPECT_TRUE(row(r, "grads/embed_tokens.weight").failed());
}

// The rule itself: the row is don't-care only when the pad id is a real token.
TEST(Candidate, ThePadRowRuleAppliesOnlyWhenThePadIdIsARealToken) {
  const GoldenCase g =
      read_golden(std::string(GEMMA4_SOURCE_DIR) + "/golden/transformers/dense_keqv/golden.f32.h5");
  TensorMap inputs = g.inputs;
  EXPECT_EQ(model_judged(inputs, g.expected, 0).count("grads/embed_tokens.weight"), 1u);
  EXPECT_EQ(model_judged(inputs, g.expected, -1).count("grads/embed_tokens.weight"), 0u);
  inputs.at("input_ids") = inputs.at("input_ids").masked_fill(inputs.at("input_ids").eq(0), 5);
  EXPECT_EQ(model_judged(inputs, g.expected, 0).count("grads/embed_tokens.weight"), 0u);
}

}  // namespace
}  // namespace gemma4::golden
