// determinism, for backends that claim it (Capabilities::deterministic; the others are reported
// not_supported):
// - twice/<model>: the same inputs twice give bitwise-equal logits, loss and gradients;
// - attention_op/<case>: the attention op alone, forward and backward 100 times on one fixed case
//   (on CUDA a sliding case of head dim 256 and a global one of head dim 512, S 257, GQA; on the
//   CPU a small sliding one): the output and dK, dV, dQ of every repeat bitwise equal to the first
//   run's, one row each with the number of repeats that differ.
#include <ATen/ATen.h>

#include <sstream>

#include "conformance/check.h"
#include "conformance/compare.h"
#include "conformance/tiny_models.h"
#include "golden/model_cases.h"
#include "golden/op_cases.h"
#include "golden/tolerance.h"

namespace gemma4::conformance {
namespace {

constexpr int kRepeats = 100;
constexpr uint64_t kSeed = 2027;

std::vector<golden::OpCase> attention_op_cases(const torch::Device& device) {
  using golden::attention_case;
  if (device.is_cuda()) {
    return {attention_case({LayerType::kSliding, 100, 2, 257, 8, 2, 256, {}, false}),
            attention_case({LayerType::kFull, 0, 2, 257, 8, 2, 512, {}, false})};
  }
  return {attention_case({LayerType::kSliding, 13, 2, 37, 4, 2, 16, {}, false})};
}

// The bits, so that a NaN equals itself and -0 differs from +0.
torch::Tensor bits(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  switch (c.element_size()) {
    case 2: return c.view(torch::kInt16);
    case 4: return c.view(torch::kInt32);
    default: return c.view(torch::kInt64);
  }
}

void check_attention_op(const golden::OpCase& c, const SuiteOptions& o, Reporter& reporter) {
  if (!o.backend.capabilities.deterministic) return reporter.not_supported("not claimed by the backend");
  const bool sliding = c.params.at("layer_type") == layer_type_name(LayerType::kSliding);
  const std::string why = o.backend.capabilities.unsupported(o.device, o.dtype, c.params.at("head_dim").get<int64_t>(),
                                                             sliding ? c.params.at("sliding_window").get<int64_t>() : 0);
  if (!why.empty()) return reporter.not_supported(why);
  const golden::OpTensors t = golden::make_op_tensors(c, kSeed, o.dtype, o.device);
  auto run = [&] {
    const golden::OpResult r = golden::run_op(c.op, c.params, t.inputs, t.upstream, o.backend.ops);
    // The output, then dK and dV, then dQ (the gradient FlashAttention's backward accumulates with atomics).
    std::vector<std::pair<std::string, torch::Tensor>> rows;
    for (const auto& [name, out] : r.outputs) rows.emplace_back("outputs/" + name, out);
    for (const char* name : {"k", "v", "q"}) {
      const auto it = r.grads.find(name);
      rows.emplace_back(std::string("grads/") + name, it == r.grads.end() ? torch::Tensor() : it->second);
    }
    return rows;
  };
  const auto first = run();
  std::vector<int> differing(first.size(), 0), first_differing(first.size(), 0);
  std::vector<double> worst(first.size(), 0.0);
  for (int repeat = 1; repeat < kRepeats; ++repeat) {
    const auto again = run();
    for (size_t i = 0; i < first.size(); ++i) {
      const torch::Tensor& a = first[i].second;
      const torch::Tensor& b = again[i].second;
      if (!a.defined()) continue;  // reported once below
      const bool comparable = b.defined() && a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type();
      if (comparable && at::equal(bits(a), bits(b))) continue;
      if (differing[i]++ == 0) first_differing[i] = repeat;
      if (comparable) worst[i] = std::max(worst[i], golden::measure(b, a).max_abs);
    }
  }
  for (size_t i = 0; i < first.size(); ++i) {
    const std::string& row = first[i].first;
    if (!first[i].second.defined()) {
      reporter.fail(row, "no gradient reaches it");
      continue;
    }
    std::ostringstream detail;
    if (differing[i] == 0) {
      detail << "bitwise equal in all " << kRepeats << " runs";
    } else {
      detail << differing[i] << " of " << kRepeats - 1 << " repeats differ from the first run, first repeat "
             << first_differing[i] << ", max_abs difference " << worst[i];
    }
    reporter.record(row, "differing_repeats", differing[i], 0, differing[i] == 0, detail.str());
  }
}

}  // namespace

std::vector<Check> determinism_checks(const SuiteOptions& options) {
  std::vector<Check> checks;
  for (const std::string& name : tiny_model_names()) {
    checks.push_back({Category::kDeterminism, "twice/" + name, [name](const SuiteOptions& o, Reporter& reporter) {
                        if (!o.backend.capabilities.deterministic) return reporter.not_supported("not claimed by the backend");
                        const TinyModel m = tiny_model(name, o);
                        const std::string why = unsupported(o, m.config);
                        if (!why.empty()) return reporter.not_supported(why);
                        const ForwardOptions f = backend_forward(o, m.config);
                        const golden::TensorMap a = golden::run_model(m.config, m.weights, m.inputs, f);
                        const golden::TensorMap b = golden::run_model(m.config, m.weights, m.inputs, f);
                        int differing = 0;
                        std::string first;
                        for (const auto& [dataset, t] : a) {
                          if (at::equal(t, b.at(dataset))) continue;
                          if (differing++ == 0) first = dataset;
                        }
                        reporter.record(std::to_string(a.size()) + " tensors", "differing_tensors", differing, 0,
                                        differing == 0, differing ? "first: " + first : "bitwise equal");
                      }});
  }
  for (const golden::OpCase& c : attention_op_cases(options.device)) {
    checks.push_back({Category::kDeterminism, "attention_op/" + c.name,
                      [c](const SuiteOptions& o, Reporter& reporter) { check_attention_op(c, o, reporter); }});
  }
  return checks;
}

}  // namespace gemma4::conformance
