#pragma once
// What `golden check` adds for a quantized subject (golden/FORMAT.md, "Quantized subjects"), whose
// golden was made on the weights its file holds, dequantized:
// - the file's own verdict: each tensor against what a correct quantizer to its type can move it
//   (gguf_dequantized.py's quantization.json beside the dequantized checkpoint), since a bug in the
//   file (a zeroed expert, scales written twice) is in the golden too and conformance cannot see it;
// - the envelope: how far the subject's next-token distributions are from the float model's, the
//   figures llama.cpp's `llama-perplexity --kl-divergence` reports. Reported, never judged:
//   quantization moves them by design, and a bug can hide inside them.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "golden/golden_file.h"

namespace gemma4::golden {

// One tensor of quantization.json: how far quantization moved it, over the most a correct
// quantizer to its type can (no bound: a type without one, the K-quants).
struct QuantizedTensor {
  std::string checkpoint_name, stored_name, stored_type;
  double nmse = 0;
  std::optional<double> bound_ratio;
  // Stored in a float type in a file declaring a quantized one, where its quantizer would have
  // quantized it (gguf_dequantized.py: NVIDIA/Model-Optimizer #1173's skipped experts).
  bool left_unquantized = false;
};
// The tensors of `checkpoint_dir`/quantization.json; empty when there is no such file (a checkpoint
// not made by gguf_dequantized.py). Throws naming the file and field when it is malformed.
std::vector<QuantizedTensor> read_quantization_record(const std::string& checkpoint_dir);

// Which positions a figure is over, by the token's position id p and the sliding window W:
// before the window has slid (p < W - kEdge), across its edge (|p - W| <= kEdge: the first
// queries whose sliding layers lose the oldest key), beyond it (p > W + kEdge), and all of them.
// A decoding run splits its positions otherwise: the prompt's (prefill) and the steps' (decode).
enum class EnvelopeSplit { kAll, kBeforeWindow, kAcrossWindow, kBeyondWindow, kPrefill, kDecode };
// "all", "before_window", "across_window", "beyond_window", "prefill", "decode"
const char* envelope_split_name(EnvelopeSplit split);
constexpr int64_t kEnvelopeEdge = 16;

struct EnvelopeFigures {
  EnvelopeSplit split = EnvelopeSplit::kAll;
  int64_t tokens = 0;          // judged positions in the split
  double kld_mean = 0, kld_p99 = 0, kld_max = 0;  // KL(float || subject), nats, over the vocabulary
  double top1_agreement = 0;   // fraction of positions whose argmax equals the float model's
  double delta_p_mean = 0;     // mean of p_subject(t) - p_float(t), t the float model's top token
  double delta_p_rms = 0;      // and its RMS
};

// The figures' metrics by name ("kld_mean", "kld_p99", "kld_max", "top1_agreement", "delta_p_mean",
// "delta_p_rms"), as measurements name them ("<subject>/<split>/<metric>").
std::vector<std::pair<const char*, double>> envelope_metrics(const EnvelopeFigures& f);

// The figures of `logits` [B, S, V] (a subject's, after the soft-cap) against `float_logits` (the
// float model's on the same inputs), over the judged positions of `quantized` (its judged/ of
// outputs/logits, its inputs/position_ids and sliding_window), in fp64. Throws naming the tensor
// whose shape disagrees. Splits without a position are left out.
std::vector<EnvelopeFigures> envelope(const GoldenCase& quantized, const torch::Tensor& float_logits,
                                      const torch::Tensor& logits);

// The same figures of `logits` [..., V] against `float_logits` over each split's positions (a bool
// mask of logits' shape less the vocabulary), leaving out the splits without a position.
std::vector<EnvelopeFigures> envelope_over(const torch::Tensor& float_logits, const torch::Tensor& logits,
                                           const std::vector<std::pair<EnvelopeSplit, torch::Tensor>>& splits);

}  // namespace gemma4::golden
