#include "golden/quantized_subject.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "reference/error.h"

namespace gemma4::golden {

std::vector<QuantizedTensor> read_quantization_record(const std::string& checkpoint_dir) {
  const std::filesystem::path path = std::filesystem::path(checkpoint_dir) / "quantization.json";
  if (!std::filesystem::exists(path)) return {};
  std::ifstream in(path);
  nlohmann::json j;
  try {
    in >> j;
    std::vector<QuantizedTensor> out;
    for (const nlohmann::json& t : j.at("tensors")) {
      QuantizedTensor q{t.at("checkpoint_name").get<std::string>(), t.at("stored_name").get<std::string>(),
                        t.at("stored_type").get<std::string>(), t.at("nmse").get<double>(), std::nullopt};
      if (!t.at("bound_ratio").is_null()) q.bound_ratio = t.at("bound_ratio").get<double>();
      q.left_unquantized = t.value("left_unquantized", false);  // older records and other formats: absent
      out.push_back(q);
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": not a quantization record (" + e.what() + ")");
  }
}

const char* envelope_split_name(EnvelopeSplit split) {
  switch (split) {
    case EnvelopeSplit::kAll: return "all";
    case EnvelopeSplit::kBeforeWindow: return "before_window";
    case EnvelopeSplit::kAcrossWindow: return "across_window";
    case EnvelopeSplit::kBeyondWindow: return "beyond_window";
    case EnvelopeSplit::kPrefill: return "prefill";
    case EnvelopeSplit::kDecode: return "decode";
  }
  return "?";
}

namespace {

// [B, S] bool: the positions of `split` among `judged`.
torch::Tensor split_mask(EnvelopeSplit split, const torch::Tensor& judged, const torch::Tensor& position, int64_t window) {
  switch (split) {
    case EnvelopeSplit::kAll: return judged;
    case EnvelopeSplit::kBeforeWindow: return judged & (position < window - kEnvelopeEdge);
    case EnvelopeSplit::kAcrossWindow: return judged & ((position - window).abs() <= kEnvelopeEdge);
    case EnvelopeSplit::kBeyondWindow: return judged & (position > window + kEnvelopeEdge);
    case EnvelopeSplit::kPrefill:  // a decoding run's splits, not positions'
    case EnvelopeSplit::kDecode: break;
  }
  return judged;
}

}  // namespace

std::vector<std::pair<const char*, double>> envelope_metrics(const EnvelopeFigures& f) {
  return {{"kld_mean", f.kld_mean},         {"kld_p99", f.kld_p99},           {"kld_max", f.kld_max},
          {"top1_agreement", f.top1_agreement}, {"delta_p_mean", f.delta_p_mean}, {"delta_p_rms", f.delta_p_rms}};
}

std::vector<EnvelopeFigures> envelope(const GoldenCase& quantized, const torch::Tensor& float_logits,
                                      const torch::Tensor& logits) {
  const auto expected = quantized.expected.find("outputs/logits");
  if (expected == quantized.expected.end()) throw Error("the quantized golden has no outputs/logits");
  const auto shape = expected->second.sizes();
  if (float_logits.sizes() != shape) throw Error("the float model's outputs/logits has another shape than the quantized golden's");
  if (logits.sizes() != shape) throw Error("the candidate's outputs/logits has another shape than the golden's");
  const int64_t batch = shape[0], seq = shape[1];
  // Judged positions: the golden's mask of the logits, reduced over the vocabulary.
  torch::Tensor judged = torch::ones({batch, seq}, torch::kBool);
  if (auto j = quantized.judged.find("outputs/logits"); j != quantized.judged.end()) {
    judged = j->second.to(torch::kBool).expand(shape).all(-1);
  }
  const auto pos = quantized.inputs.find("position_ids");
  const torch::Tensor position = pos != quantized.inputs.end() ? pos->second.to(torch::kLong)
                                                               : torch::arange(seq).expand({batch, seq});
  const int64_t window = quantized.config.value("sliding_window", int64_t{0});

  std::vector<std::pair<EnvelopeSplit, torch::Tensor>> splits;
  for (EnvelopeSplit split : {EnvelopeSplit::kAll, EnvelopeSplit::kBeforeWindow, EnvelopeSplit::kAcrossWindow,
                              EnvelopeSplit::kBeyondWindow}) {
    splits.emplace_back(split, split_mask(split, judged, position, window));
  }
  return envelope_over(float_logits, logits, splits);
}

std::vector<EnvelopeFigures> envelope_over(const torch::Tensor& float_logits, const torch::Tensor& logits,
                                           const std::vector<std::pair<EnvelopeSplit, torch::Tensor>>& splits) {
  const torch::Tensor log_f = at::log_softmax(float_logits.to(torch::kDouble), -1);
  const torch::Tensor log_c = at::log_softmax(logits.to(torch::kDouble), -1);
  const torch::Tensor kld = (log_f.exp() * (log_f - log_c)).sum(-1);
  const torch::Tensor top_f = log_f.argmax(-1, true);
  const torch::Tensor agree = top_f.squeeze(-1) == log_c.argmax(-1);
  const torch::Tensor delta_p = (log_c.gather(-1, top_f).exp() - log_f.gather(-1, top_f).exp()).squeeze(-1);

  std::vector<EnvelopeFigures> out;
  for (const auto& [split, mask] : splits) {
    const torch::Tensor m = mask.to(torch::kBool).to(kld.device());
    const int64_t n = m.sum().item<int64_t>();
    if (n == 0) continue;
    const torch::Tensor k = kld.masked_select(m), d = delta_p.masked_select(m);
    EnvelopeFigures f;
    f.split = split;
    f.tokens = n;
    f.kld_mean = k.mean().item<double>();
    f.kld_p99 = at::quantile(k, 0.99).item<double>();
    f.kld_max = k.max().item<double>();
    f.top1_agreement = agree.masked_select(m).to(torch::kDouble).mean().item<double>();
    f.delta_p_mean = d.mean().item<double>();
    f.delta_p_rms = d.square().mean().sqrt().item<double>();
    out.push_back(f);
  }
  return out;
}

}  // namespace gemma4::golden
