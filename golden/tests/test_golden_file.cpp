// Golden files (golden/golden_file.h, catalogue.h, verify.h): written deterministically, read back
// whole, refused with a clear error when damaged, and verified so that a wrong tensor fails.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "golden/catalogue.h"
#include "golden/golden_file.h"
#include "golden/h5_tensors.h"
#include "golden/model_cases.h"
#include "golden/verify.h"
#include "golden/tests/test_files.h"
#include "reference/error.h"
#include "reference/files.h"

namespace gemma4::golden {
namespace {

using test::error_of;
using test::temp_path;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

GoldenCase generate(const std::string& name, torch::ScalarType dtype, uint64_t seed = 0) {
  GenerateOptions o;
  o.dtype = dtype;
  o.seed = seed;
  o.generator = "reference test";
  o.configs_dir = released_configs_dir();
  return generate_case(name, o);
}

TEST(GoldenFile, RoundTripKeepsEveryDatasetAndAttribute) {
  const GoldenCase g = generate("model/e2b", torch::kBFloat16);
  const std::string path = temp_path("e2b.h5");
  write_golden(path, g);
  const GoldenCase r = read_golden(path);
  EXPECT_EQ(r.kind, "model");
  EXPECT_EQ(r.name, "model/e2b");
  EXPECT_EQ(r.dtype, "bf16");
  EXPECT_EQ(r.kv_key, "layer-type");
  EXPECT_EQ(r.weights_mode, golden::WeightsMode::kStored);
  EXPECT_EQ(r.config, g.config);
  EXPECT_EQ(r.tolerance_class(), "reduced-precision");
  for (const auto& [group, a, b] : {std::tuple{"inputs", &g.inputs, &r.inputs}, {"weights", &g.weights, &r.weights},
                                    {"expected", &g.expected, &r.expected}, {"truth", &g.truth, &r.truth}}) {
    ASSERT_EQ(a->size(), b->size()) << group;
    for (const auto& [name, t] : *a) {
      EXPECT_TRUE(at::equal(t.to(b->at(name).scalar_type()), b->at(name))) << group << "/" << name;
    }
  }
  // The model-level datasets FORMAT.md promises: 7 layers, two of them storing K/V.
  EXPECT_TRUE(r.expected.count("outputs/hidden_states/7"));
  EXPECT_TRUE(r.expected.count("outputs/attention_output/6"));
  EXPECT_TRUE(r.expected.count("outputs/shared_kv/3/k") && r.expected.count("outputs/shared_kv/4/v"));
  EXPECT_TRUE(r.expected.count("grads/layers.0.self_attn.k_proj.weight"));
}

TEST(GoldenFile, RewritingKeepsAQuantizedGoldensAttributesAndItsRelativeCheckpoint) {
  // `golden baseline` reads a golden and writes it back: a quantized case's attributes (FORMAT.md,
  // "Quantized subjects") and its checkpoint beside it (".", so that the directory moves whole) stay.
  GoldenCase g = generate("model/e2b", torch::kBFloat16);
  const std::string dir = temp_path("case"), path = dir + "/golden.bf16.h5";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << g.config.dump();
  g.weights_mode = WeightsMode::kCheckpoint;
  g.checkpoint = ".";
  g.quantization = "Q8_0";
  g.truth_weights = "exact";
  write_golden(path, g);
  for (int rewrite = 0; rewrite < 2; ++rewrite) {
    const GoldenCase r = read_golden(path);
    EXPECT_EQ(r.quantization, "Q8_0");
    EXPECT_EQ(r.truth_weights, "exact");
    EXPECT_EQ(r.checkpoint_as_written, ".");
    EXPECT_EQ(r.checkpoint, dir + "/.");  // resolved against the file's directory
    write_golden(path, r);
  }
  EXPECT_EQ(h5::File::open_read(path).attr_string("/", "checkpoint"), ".");
}

TEST(GoldenFile, GeneratingTwiceGivesByteIdenticalFiles) {
  for (const char* name : {"model/26b-a4b", "op/rms_norm-scale"}) {
    const std::string a = temp_path("a.h5"), b = temp_path("b.h5");
    write_golden(a, generate(name, torch::kFloat16));
    write_golden(b, generate(name, torch::kFloat16));
    EXPECT_EQ(bytes_of(a), bytes_of(b)) << name;
    // And the seed matters.
    write_golden(b, generate(name, torch::kFloat16, /*seed=*/1));
    EXPECT_NE(bytes_of(a), bytes_of(b)) << name;
  }
}

TEST(GoldenFile, BadFilesAreRefusedNamingTheProblem) {
  const std::string good = temp_path("good.h5");
  write_golden(good, generate("op/rms_norm-scale", torch::kBFloat16));

  const std::string truncated = temp_path("truncated.h5");
  std::ofstream(truncated, std::ios::binary) << bytes_of(good).substr(0, files::file_size(good) / 2);
  EXPECT_NE(error_of([&] { read_golden(truncated); }).find(truncated), std::string::npos);

  const std::string text = temp_path("text.h5");
  std::ofstream(text) << "not hdf5";
  EXPECT_NE(error_of([&] { read_golden(text); }).find("not an HDF5 file"), std::string::npos);

  auto rewrite = [&](const std::string& name, const std::function<void(GoldenCase&)>& mutate) {
    GoldenCase g = read_golden(good);
    mutate(g);
    const std::string path = temp_path(name);
    write_golden(path, g);
    return path;
  };
  const std::string nan = rewrite("nan.h5", [](GoldenCase& g) { g.expected.begin()->second.view(-1)[0] = NAN; });
  EXPECT_NE(error_of([&] { read_golden(nan); }).find("holds NaN or infinity"), std::string::npos);
  const std::string no_truth = rewrite("no_truth.h5", [](GoldenCase& g) { g.truth.clear(); });
  EXPECT_NE(error_of([&] { read_golden(no_truth); }).find("needs a 'truth' group"), std::string::npos);

  const std::string version = temp_path("version.h5");
  {
    h5::File f = h5::File::create(version);
    f.set_attr("/", "format_version", int64_t{3});
  }
  EXPECT_NE(error_of([&] { read_golden(version); }).find("format_version 3"), std::string::npos);

  // Format 2: the baseline family's table and the judged masks are checked too.
  const std::string no_baseline = rewrite("no_baseline.h5", [](GoldenCase& g) { g.baseline.erase(g.baseline.begin()); });
  EXPECT_NE(error_of([&] { read_golden(no_baseline); }).find("'baseline/"), std::string::npos);
  // A file without baseline/ at all is what `golden baseline` fills in.
  const std::string bare = rewrite("bare.h5", [](GoldenCase& g) {
    g.baseline.clear();
    g.baseline_family.clear();
  });
  EXPECT_NE(error_of([&] { read_golden(bare); }).find("needs root attribute 'baseline_family'"), std::string::npos);
  EXPECT_NO_THROW(read_golden(bare, /*need_baseline=*/false));
  const std::string short_table = rewrite("short_table.h5", [](GoldenCase& g) { g.baseline_family.push_back("extra"); });
  EXPECT_NE(error_of([&] { read_golden(short_table); }).find("one row per baseline_family member"), std::string::npos);
  const std::string bad_mask = rewrite("bad_mask.h5", [](GoldenCase& g) {
    g.judged["outputs/y"] = at::ones({3, 1, 1}, at::kLong);  // y is [2, 8, 32]
  });
  EXPECT_NE(error_of([&] { read_golden(bad_mask); }).find("does not broadcast"), std::string::npos);
  const std::string stray_mask = rewrite("stray_mask.h5", [](GoldenCase& g) { g.judged["outputs/z"] = at::ones({1}, at::kLong); });
  EXPECT_NE(error_of([&] { read_golden(stray_mask); }).find("names no dataset"), std::string::npos);
}

// The committed model goldens store their weights and inputs, so conform never regenerates them; the
// generator (reference/counter_random, reference/weights) must still make them bit for bit from the
// file's seed, or a regenerated golden would silently differ (mutations of the generator's constants
// survived the suite: conformance/quality/mutation). Negative control: another seed differs.
TEST(GoldenFile, CommittedModelWeightsAndInputsAreTheSeededOnes) {
  for (const char* name : {"e2b", "26b-a4b"}) {
    const GoldenCase g = read_golden(std::string(GEMMA4_SOURCE_DIR) + "/golden/reference/model/" + name + ".f32.h5", false);
    ASSERT_EQ(g.weights_mode, golden::WeightsMode::kStored) << name;
    const Config config = parse_config(g.config);
    for (uint64_t seed : {g.seed, g.seed + 1}) {
      const TensorMap weights = weights_to_map(config, random_weights(config, seed, torch::kFloat32, torch::kCPU));
      const torch::Tensor& ids = g.inputs.at("input_ids");
      const TensorMap inputs = make_model_inputs(config, ids.size(0), ids.size(1), seed);
      int differing = 0;
      for (const auto& [key, stored] : g.weights) differing += !torch::equal(weights.at(key), stored);
      differing += !torch::equal(inputs.at("input_ids"), ids);
      if (seed == g.seed) {
        EXPECT_EQ(differing, 0) << name << ": tensors that the seed no longer makes";
      } else {
        EXPECT_EQ(differing, static_cast<int>(g.weights.size()) + 1) << name << ": seed " << seed;
      }
    }
  }
}

TEST(GoldenVerify, ReferenceCasesVerifyAndAMutatedTensorFails) {
  for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
    GoldenCase g = generate("model/31b", dtype);
    const VerifyReport ok = verify_golden(g, torch::kCPU);
    EXPECT_TRUE(ok.pass()) << g.dtype;
    EXPECT_EQ(ok.checks.size(), g.expected.size());

    // Negative control: one gradient element of the golden moved by 30% of the tensor's scale (in
    // bf16 the truth with it, as if the file held another computation's result). bf16 gradients of
    // the tiny models legitimately err by a few percent of their scale, so a shift must clear
    // k_max times that.
    const std::string name = "grads/layers.3.self_attn.k_proj.weight";
    const double shift = 0.3 * g.expected.at(name).abs().max().item<double>();
    g.expected.at(name).view(-1)[5] += shift;
    if (dtype != torch::kFloat32) g.truth.at(name).view(-1)[5] += shift;
    const VerifyReport bad = verify_golden(g, torch::kCPU);
    EXPECT_FALSE(bad.pass()) << g.dtype;
    EXPECT_EQ(bad.failures(), 1) << g.dtype;
  }
}

TEST(GoldenVerify, ACandidateMissingADatasetFails) {
  const GoldenCase g = generate("op/rms_norm-scale", torch::kFloat32);
  TensorMap candidate = recompute(g, torch::kCPU);
  EXPECT_TRUE(judge(g, candidate).pass());
  candidate.erase(candidate.begin());
  const VerifyReport report = judge(g, candidate);
  EXPECT_FALSE(report.pass());
  EXPECT_EQ(report.checks.front().problem, "not computed by the candidate");
}

TEST(GoldenVerify, LayerCasesRecomputeFromTheSeed) {
  // A real-geometry layer case in miniature: the tiny 26B-A4B config, its global layer, weights
  // not stored but recreated from the seed.
  GoldenCase g;
  g.kind = "layer";
  g.name = "test/layer";
  g.config = tiny_config(model_cases()[3], released_configs_dir());
  g.dtype = "f32";
  g.seed = 3;
  g.weights_mode = golden::WeightsMode::kGenerated;
  const Config config = parse_config(g.config);
  g.layer = first_layer_of_type(config, LayerType::kFull);
  g.inputs = make_layer_inputs(config, 16, g.seed, false);
  g.upstream = make_layer_inputs(config, 16, g.seed, true);
  const int l = static_cast<int>(g.layer);
  g.expected = run_layer(config, l, random_layer_weights(config, l, g.seed, torch::kFloat32, torch::kCPU), g.inputs, g.upstream);
  EXPECT_TRUE(g.expected.count("grads/layers.2.experts.gate_up_proj"));
  EXPECT_TRUE(verify_golden(g, torch::kCPU).pass());
  g.seed = 4;  // other weights: everything that depends on them fails
  EXPECT_FALSE(verify_golden(g, torch::kCPU).pass());
}

}  // namespace
}  // namespace gemma4::golden
