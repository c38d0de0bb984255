// The reference against transformers itself: tiny cases written by tools/hf_cases.py (committed
// under golden/transformers/), each run plainly and with checkpointing + the layer-index KV key
// convention, on CPU and (where one is present) CUDA. Bounds (fp32): logits and hidden states
// cosine >= 0.99999 and max error <= 1e-4 x max|expected|; loss relative error <= 1e-5; every
// gradient cosine >= 0.9999. bf16 and f16 runs follow the FlashAttention rule (below).
#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include <torch/cuda.h>

#include "golden/h5_tensors.h"
#include "reference/files.h"
#include "reference/hf_checkpoint.h"
#include "reference/inputs.h"
#include "reference/tests/test_support.h"

namespace gemma4 {
namespace {

struct CaseRun {
  std::string case_name;
  bool checkpoint_and_layer_index;
  bool cuda;
};

// gtest prints parameters in failure messages; print the name instead of raw bytes.
void PrintTo(const CaseRun& run, std::ostream* os) {
  *os << run.case_name << (run.checkpoint_and_layer_index ? " checkpoint+layer-index" : " plain")
      << (run.cuda ? " cuda" : " cpu");
}

std::vector<CaseRun> all_runs() {
  std::vector<CaseRun> runs;
  std::vector<std::string> names;
  for (const std::string& name : files::list_directory(test::transformers_cases_dir())) {
    if (files::is_file(files::join(files::join(test::transformers_cases_dir(), name), "expected.h5"))) names.push_back(name);
  }
  for (bool cuda : {false, true}) {
    for (const std::string& n : names) {
      runs.push_back({n, false, cuda});
      runs.push_back({n, true, cuda});
    }
  }
  return runs;
}

std::string run_name(const ::testing::TestParamInfo<CaseRun>& info) {
  return info.param.case_name + (info.param.checkpoint_and_layer_index ? "_checkpoint_layer_index" : "_plain") +
         (info.param.cuda ? "_cuda" : "_cpu");
}

// The fp32 activation bounds; returns "" when met, else what failed.
std::string activation_mismatch(const torch::Tensor& ours, const torch::Tensor& expected) {
  if (ours.sizes() != expected.sizes()) return "shape differs";
  const double cos = test::cosine(ours, expected);
  const double err = test::max_abs_diff(ours, expected);
  const double bound = 1e-4 * expected.abs().max().item<double>();
  if (cos < 0.99999) return "cosine " + std::to_string(cos) + " < 0.99999";
  if (err > bound) return "max abs error " + std::to_string(err) + " > " + std::to_string(bound);
  return "";
}

void expect_close_activation(const std::string& what, const torch::Tensor& ours, const torch::Tensor& expected) {
  EXPECT_EQ(activation_mismatch(ours, expected), "") << what;
}

std::vector<CaseRun> plain_runs() {
  std::vector<CaseRun> runs = all_runs();
  runs.erase(std::remove_if(runs.begin(), runs.end(), [](const CaseRun& r) { return r.checkpoint_and_layer_index; }),
             runs.end());
  return runs;
}

class AgainstTransformers : public ::testing::TestWithParam<CaseRun> {};
class ReducedPrecision : public ::testing::TestWithParam<CaseRun> {};

TEST_P(AgainstTransformers, ForwardAndBackwardMatch) {
  if (GetParam().cuda && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device device = GetParam().cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const std::string dir = files::join(test::transformers_cases_dir(), GetParam().case_name);
  Model model = load_model(dir, torch::kFloat32, device);
  const ForwardInputs inputs = load_inputs(files::join(dir, "inputs.safetensors"));
  const h5::File expected = h5::File::open_read(files::join(dir, "expected.h5"));
  ForwardOptions options;
  if (GetParam().checkpoint_and_layer_index) {
    options.checkpoint_layers.assign(model.config().num_hidden_layers, true);
    options.kv_key = KvKeyConvention::kLayerIndex;
  }
  model.set_requires_grad(true);
  const ForwardOutputs out = model.forward(inputs, options);
  out.loss.backward();

  expect_close_activation("logits", out.logits.detach().cpu(), expected.read("logits"));
  ASSERT_EQ(out.hidden_states.size(), expected.children("hidden_states").size());
  for (size_t i = 0; i < out.hidden_states.size(); ++i) {
    const std::string name = "hidden_states/" + std::to_string(i);
    expect_close_activation(name, out.hidden_states[i].detach().cpu(), expected.read(name));
  }
  const double loss = out.loss.item<double>(), expected_loss = expected.read("loss").item<double>();
  EXPECT_LE(std::abs(loss - expected_loss) / std::abs(expected_loss), 1e-5) << loss << " vs " << expected_loss;

  std::set<std::string> expected_grads;
  for (const std::string& key : expected.children("grads")) expected_grads.insert(key);
  std::set<std::string> ours;
  for (const auto& [key, tensor] : model.named_trainable_tensors()) {
    ours.insert(key);
    SCOPED_TRACE(key);
    ASSERT_TRUE(expected_grads.count(key)) << "transformers has no gradient for this tensor";
    ASSERT_TRUE(tensor.grad().defined()) << "no gradient reached this tensor";
    EXPECT_GE(test::cosine(tensor.grad().cpu(), expected.read("grads/" + key)), 0.9999);
  }
  EXPECT_EQ(ours, expected_grads);
}

// The FlashAttention rule for bf16 and f16: against the fp32 transformers run as truth, our
// error must be at most k times the error of transformers' own eager run in the same dtype
// (expected_<dtype>.h5, written on CPU), k = 2 for activations and 3 for gradients, plus a floor:
// the unit roundoff of the dtype times max|truth|, what merely storing the truth in that dtype
// may cost. The floor matters where the eager error is a single lucky sample (the 0-d loss) or
// where the candidate runs on another device than the eager baseline (CUDA vs CPU kernels).
// Cosine and NMSE are printed alongside.
struct RuleResult {
  double ours_err, eager_err, bound, cosine, nmse;
};

double unit_roundoff(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);  // bf16: 8-bit, f16: 11-bit significand
}

RuleResult flash_attention_rule(const torch::Tensor& ours, const torch::Tensor& eager, const torch::Tensor& truth,
                                double k, torch::ScalarType dtype) {
  const torch::Tensor t = truth.to(torch::kFloat64), o = ours.to(torch::kFloat64);
  const double ours_err = (o - t).abs().max().item<double>();
  const double eager_err = (eager.to(torch::kFloat64) - t).abs().max().item<double>();
  const double bound = k * eager_err + unit_roundoff(dtype) * t.abs().max().item<double>();
  const double nmse = ((o - t).pow(2).mean() / t.pow(2).mean().clamp_min(1e-300)).item<double>();
  return {ours_err, eager_err, bound, test::cosine(ours, truth), nmse};
}

TEST_P(ReducedPrecision, FlashAttentionRule) {
  if (GetParam().cuda && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device device = GetParam().cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const std::string dir = files::join(test::transformers_cases_dir(), GetParam().case_name);
  const h5::File truth = h5::File::open_read(files::join(dir, "expected.h5"));
  const ForwardInputs inputs = load_inputs(files::join(dir, "inputs.safetensors"));
  for (const auto& [dtype, file] : {std::pair{torch::kBFloat16, "expected_bf16.h5"}, std::pair{torch::kFloat16, "expected_f16.h5"}}) {
    SCOPED_TRACE(c10::toString(dtype));
    const h5::File eager = h5::File::open_read(files::join(dir, file));
    Model model = load_model(dir, dtype, device);
    model.set_requires_grad(true);
    const ForwardOutputs out = model.forward(inputs);
    out.loss.backward();

    auto check = [&](const std::string& name, const torch::Tensor& ours, double k) {
      const RuleResult r = flash_attention_rule(ours.detach().cpu(), eager.read(name), truth.read(name), k, dtype);
      EXPECT_LE(r.ours_err, r.bound) << name << ": ours " << r.ours_err << " vs " << k << " x eager " << r.eager_err
                                     << " (cosine " << r.cosine << ", nmse " << r.nmse << ")";
      return r;
    };
    RuleResult worst_logits = check("logits", out.logits, 2);
    check("loss", out.loss, 2);
    for (size_t i = 0; i < out.hidden_states.size(); ++i) check("hidden_states/" + std::to_string(i), out.hidden_states[i], 2);
    double worst_grad_ratio = 0, worst_grad_cosine = 1;
    for (const auto& [key, tensor] : model.named_trainable_tensors()) {
      ASSERT_TRUE(tensor.grad().defined()) << key;
      const RuleResult r = check("grads/" + key, tensor.grad(), 3);
      worst_grad_ratio = std::max(worst_grad_ratio, r.ours_err / std::max(r.eager_err, 1e-30));
      worst_grad_cosine = std::min(worst_grad_cosine, r.cosine);
    }
    std::cout << GetParam().case_name << " " << c10::toString(dtype) << ": logits err " << worst_logits.ours_err
              << " (eager " << worst_logits.eager_err << ", cosine " << worst_logits.cosine << ", nmse " << worst_logits.nmse
              << "); worst grad err ratio " << worst_grad_ratio << ", worst grad cosine " << worst_grad_cosine << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AgainstTransformers, ::testing::ValuesIn(all_runs()), run_name);
INSTANTIATE_TEST_SUITE_P(Cases, ReducedPrecision, ::testing::ValuesIn(plain_runs()), run_name);

// Negative control: the bounds above catch a 0.1% error in the first layer's post-feedforward norm scale,
// and a Gemma-2/3 style (1 + w) norm on the final norm.
TEST(AgainstTransformersNegativeControl, SmallWeightErrorsFailTheBounds) {
  const std::string dir = files::join(test::transformers_cases_dir(), "dense_keqv");
  const Model model = load_model(dir, torch::kFloat32, torch::kCPU);
  const ForwardInputs inputs = load_inputs(files::join(dir, "inputs.safetensors"));
  const torch::Tensor expected = h5::File::open_read(files::join(dir, "expected.h5")).read("logits");
  torch::NoGradGuard no_grad;
  ASSERT_EQ(activation_mismatch(model.forward(inputs).logits, expected), "");

  ModelWeights scaled = model.weights();
  scaled.layers[0].post_feedforward_layernorm = scaled.layers[0].post_feedforward_layernorm * 1.001;
  EXPECT_NE(activation_mismatch(Model(model.config(), scaled).forward(inputs).logits, expected), "");

  ModelWeights one_plus_w = model.weights();
  one_plus_w.norm = one_plus_w.norm + 1;
  EXPECT_NE(activation_mismatch(Model(model.config(), one_plus_w).forward(inputs).logits, expected), "");
}

// Negative control for the FlashAttention rule: a bf16 model with a (1 + w) final norm breaks it,
// while the faithful bf16 model meets it.
TEST(AgainstTransformersNegativeControl, ReducedPrecisionRuleCatchesAOnePlusWNorm) {
  const std::string dir = files::join(test::transformers_cases_dir(), "dense_keqv");
  const Model model = load_model(dir, torch::kBFloat16, torch::kCPU);
  const ForwardInputs inputs = load_inputs(files::join(dir, "inputs.safetensors"));
  const torch::Tensor truth = h5::File::open_read(files::join(dir, "expected.h5")).read("logits");
  const torch::Tensor eager = h5::File::open_read(files::join(dir, "expected_bf16.h5")).read("logits");
  torch::NoGradGuard no_grad;
  const RuleResult faithful = flash_attention_rule(model.forward(inputs).logits, eager, truth, 2, torch::kBFloat16);
  EXPECT_LE(faithful.ours_err, faithful.bound);
  ModelWeights one_plus_w = model.weights();
  one_plus_w.norm = one_plus_w.norm + 1;
  const RuleResult broken =
      flash_attention_rule(Model(model.config(), one_plus_w).forward(inputs).logits, eager, truth, 2, torch::kBFloat16);
  EXPECT_GT(broken.ours_err, broken.bound) << "error " << broken.ours_err << ", bound " << broken.bound;
}

// Guards against an empty case folder turning the suite above into zero tests.
TEST(AgainstTransformersCases, AreCommitted) { EXPECT_GE(all_runs().size(), 2u * 2u * 5u); }

}  // namespace
}  // namespace gemma4
