// The quantized subject's additions to golden check (golden/quantized_subject.h): the envelope's
// figures on logits with a known answer, and the quantization record's reader.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "golden/quantized_subject.h"
#include "reference/error.h"

namespace gemma4::golden {
namespace {

// A quantized golden of B = 1 row, S positions 0..S-1, window W, vocabulary 4, every position judged.
GoldenCase quantized_case(int64_t seq, int64_t window) {
  GoldenCase g;
  g.config = {{"sliding_window", window}};
  g.expected["outputs/logits"] = torch::zeros({1, seq, 4});
  g.inputs["position_ids"] = torch::arange(seq).unsqueeze(0);
  return g;
}

TEST(Envelope, IdenticalLogitsGiveZeroDivergenceAndFullAgreement) {
  const GoldenCase g = quantized_case(100, 40);
  const torch::Tensor logits = torch::randn({1, 100, 4}, torch::TensorOptions().dtype(torch::kFloat32));
  const auto figures = envelope(g, logits, logits);
  ASSERT_EQ(figures.size(), 4u);  // all, before, across, beyond: each has positions
  for (const EnvelopeFigures& f : figures) {
    EXPECT_NEAR(f.kld_max, 0.0, 1e-12) << envelope_split_name(f.split);
    EXPECT_EQ(f.top1_agreement, 1.0);
    EXPECT_NEAR(f.delta_p_rms, 0.0, 1e-12);
  }
  EXPECT_EQ(figures[0].tokens, 100);
  EXPECT_EQ(figures[1].tokens, 40 - kEnvelopeEdge);      // p < W - edge
  EXPECT_EQ(figures[2].tokens, 2 * kEnvelopeEdge + 1);   // |p - W| <= edge
  EXPECT_EQ(figures[3].tokens, 100 - 40 - kEnvelopeEdge - 1);
}

// Float model: uniform over 4 tokens; subject: all mass moved to token 0 beyond the window edge.
// KL(uniform || q) with q = softmax(l, 0, 0, 0) is known in closed form.
TEST(Envelope, ChangeBeyondTheWindowShowsOnlyThere) {
  const GoldenCase g = quantized_case(100, 40);
  const torch::Tensor uniform = torch::zeros({1, 100, 4});
  torch::Tensor subject = uniform.clone();
  const double l = 2.0;
  subject.index_put_({0, torch::indexing::Slice(60, torch::indexing::None), 0}, l);
  const auto figures = envelope(g, uniform, subject);
  const double z = std::exp(l) + 3, expected_kld = 0.25 * (std::log(0.25 * z / std::exp(l)) + 3 * std::log(0.25 * z));
  EXPECT_NEAR(figures[3].kld_max, expected_kld, 1e-9);   // beyond
  EXPECT_NEAR(figures[1].kld_max, 0.0, 1e-12);           // before
  EXPECT_NEAR(figures[2].kld_max, 0.0, 1e-12);           // across
  EXPECT_LT(figures[0].kld_mean, figures[3].kld_mean);   // diluted over all positions
}

TEST(Envelope, RefusesLogitsOfAnotherShape) {
  const GoldenCase g = quantized_case(10, 4);
  EXPECT_THROW(envelope(g, torch::zeros({1, 10, 4}), torch::zeros({1, 9, 4})), Error);
  EXPECT_THROW(envelope(g, torch::zeros({1, 10, 5}), torch::zeros({1, 10, 4})), Error);
}

TEST(QuantizationRecord, AbsentIsEmptyMalformedNamesTheFile) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "gemma4_quantization_record_test";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / "quantization.json");
  EXPECT_TRUE(read_quantization_record(dir.string()).empty());
  std::ofstream(dir / "quantization.json")
      << R"({"tensors": [{"checkpoint_name": "a", "stored_name": "blk.0.a", "stored_type": "Q8_0", "nmse": 1e-5, "bound_ratio": 0.5},
                        {"checkpoint_name": "b", "stored_name": "blk.0.b", "stored_type": "Q4_K", "nmse": 1e-3, "bound_ratio": null},
                        {"checkpoint_name": "c", "stored_name": "blk.0.c", "stored_type": "F16", "nmse": 0, "bound_ratio": 0.2,
                         "left_unquantized": true}]})";
  const auto record = read_quantization_record(dir.string());
  ASSERT_EQ(record.size(), 3u);
  EXPECT_EQ(record[0].stored_type, "Q8_0");
  EXPECT_DOUBLE_EQ(*record[0].bound_ratio, 0.5);
  EXPECT_FALSE(record[0].left_unquantized);  // absent: false
  EXPECT_FALSE(record[1].bound_ratio.has_value());
  EXPECT_TRUE(record[2].left_unquantized);
  std::ofstream(dir / "quantization.json") << R"({"tensors": [{"checkpoint_name": "a"}]})";
  try {
    read_quantization_record(dir.string());
    FAIL() << "a record without stored_name was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantization.json"), std::string::npos) << e.what();
  }
  // (not remove_all: the libtorch.so copy it binds to crashes)
  std::filesystem::remove(dir / "quantization.json");
  std::filesystem::remove(dir);
}

}  // namespace
}  // namespace gemma4::golden
