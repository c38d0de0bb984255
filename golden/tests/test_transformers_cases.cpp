// The reference against transformers itself. Each case under golden/transformers/ (written by
// golden/generators/hf_cases.py) is a checkpoint directory, loaded through our Hugging Face loader, plus one
// golden file per dtype. The reference runs plainly and with checkpointing + the layer-index KV
// key convention, on CPU and (where present) CUDA, and every dataset of the golden file is judged
// by the tolerance policy (golden/FORMAT.md): fp32 against transformers' fp32 outputs, bf16 and
// f16 by the FlashAttention rule with transformers' same-dtype eager run as the baseline.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <iostream>

#include "golden/golden_file.h"
#include "golden/model_cases.h"
#include "golden/verify.h"
#include "reference/files.h"
#include "reference/hf_checkpoint.h"

namespace gemma4::golden {
namespace {

std::string cases_dir() { return std::string(GEMMA4_SOURCE_DIR) + "/golden/transformers"; }

struct CaseRun {
  std::string case_name;
  std::string dtype;
  bool checkpoint_and_layer_index;
  bool cuda;
};

void PrintTo(const CaseRun& r, std::ostream* os) {
  *os << r.case_name << " " << r.dtype << (r.checkpoint_and_layer_index ? " checkpoint+layer-index" : " plain")
      << (r.cuda ? " cuda" : " cpu");
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const std::string& name : files::list_directory(cases_dir())) {
    if (files::is_file(files::join(files::join(cases_dir(), name), "golden.f32.h5"))) names.push_back(name);
  }
  return names;
}

std::vector<CaseRun> all_runs() {
  std::vector<CaseRun> runs;
  for (bool cuda : {false, true}) {
    for (const std::string& n : case_names()) {
      for (const char* dtype : {"f32", "bf16", "f16"}) {
        runs.push_back({n, dtype, false, cuda});
        runs.push_back({n, dtype, true, cuda});
      }
    }
  }
  return runs;
}

std::string run_name(const ::testing::TestParamInfo<CaseRun>& info) {
  const CaseRun& r = info.param;
  return r.case_name + "_" + r.dtype + (r.checkpoint_and_layer_index ? "_checkpoint_layer_index" : "_plain") +
         (r.cuda ? "_cuda" : "_cpu");
}

GoldenCase golden_of(const std::string& case_name, const std::string& dtype) {
  return read_golden(files::join(files::join(cases_dir(), case_name), "golden." + dtype + ".h5"));
}

std::string failures(const VerifyReport& report) {
  std::string out;
  for (const TensorCheck& c : report.checks) {
    if (c.pass()) continue;
    out += "\n  " + c.name + ": " + (c.problem.empty() ? "error " + std::to_string(c.verdict.error()) + " > bound " +
                                                             std::to_string(c.verdict.bound()) + ", cosine " +
                                                             std::to_string(c.verdict.metrics.cosine)
                                                       : c.problem);
  }
  return out;
}

class AgainstTransformers : public ::testing::TestWithParam<CaseRun> {};

TEST_P(AgainstTransformers, EveryDatasetMeetsThePolicy) {
  const CaseRun& run = GetParam();
  if (run.cuda && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device device = run.cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const GoldenCase g = golden_of(run.case_name, run.dtype);
  EXPECT_EQ(g.provenance.generator.rfind("transformers ", 0), 0u) << g.provenance.generator;

  // The checkpoint directory, through our loader, holds exactly the golden file's weights.
  const Model model = load_model(files::join(cases_dir(), run.case_name), dtype_from_name(run.dtype), device);
  const TensorMap loaded = weights_to_map(model.config(), model.weights());
  ASSERT_EQ(loaded.size(), g.weights.size());
  for (const auto& [name, w] : loaded) {
    ASSERT_TRUE(g.weights.count(name)) << name;
    EXPECT_TRUE(at::equal(w.cpu().to(torch::kFloat32), g.weights.at(name))) << name;
  }

  ForwardOptions options;
  if (run.checkpoint_and_layer_index) {
    options.checkpoint_layers.assign(model.config().num_hidden_layers, true);
    options.kv_key = KvKeyConvention::kLayerIndex;
  }
  const VerifyReport report = judge(g, run_model(model.config(), model.weights(), g.inputs, options));
  EXPECT_TRUE(report.pass()) << failures(report);
  if (run.dtype != "f32" && !run.checkpoint_and_layer_index) {
    double worst_ratio = 0, worst_cosine = 1;
    for (const TensorCheck& c : report.checks) {
      worst_ratio = std::max(worst_ratio, c.verdict.ratio());
      worst_cosine = std::min(worst_cosine, c.verdict.metrics.cosine);
    }
    std::cout << run.case_name << " " << run.dtype << (run.cuda ? " cuda" : " cpu") << ": worst error / bound "
              << worst_ratio << ", worst cosine against truth " << worst_cosine << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AgainstTransformers, ::testing::ValuesIn(all_runs()), run_name);

// Negative controls: the policy catches a 0.1% error in one norm scale and a Gemma-2/3 style
// (1 + w) final norm in fp32, and the (1 + w) norm in bf16 under the family rule.
TEST(AgainstTransformersNegativeControl, SmallWeightErrorsFailThePolicy) {
  for (const char* dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    const GoldenCase g = golden_of("dense_keqv", dtype);
    const Config config = parse_config(g.config);
    const ModelWeights weights = weights_from_map(config, g.weights, dtype_from_name(dtype), torch::kCPU);
    ASSERT_TRUE(judge(g, run_model(config, weights, g.inputs)).pass());

    ModelWeights one_plus_w = weights;
    one_plus_w.norm = one_plus_w.norm + 1;
    const VerifyReport broken = judge(g, run_model(config, one_plus_w, g.inputs));
    EXPECT_FALSE(broken.checks.at(0).verdict.pass) << broken.checks.at(0).name;  // grads/embed_tokens.weight
    for (const TensorCheck& c : broken.checks) {
      if (c.name == "outputs/logits") EXPECT_FALSE(c.verdict.pass);
    }
    if (std::string(dtype) == "f32") {
      ModelWeights scaled = weights;
      scaled.layers[0].post_feedforward_layernorm = scaled.layers[0].post_feedforward_layernorm * 1.001;
      EXPECT_FALSE(judge(g, run_model(config, scaled, g.inputs)).pass());
    }
  }
}

// Guards against an empty case folder turning the suite above into zero tests.
TEST(AgainstTransformersCases, AreCommitted) { EXPECT_GE(case_names().size(), 5u); }

}  // namespace
}  // namespace gemma4::golden
