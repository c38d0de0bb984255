// decode: incremental decoding through the backend: its layer ops and its KV cache ops
// (Backend::kv_cache; the reference's contiguous cache when it has none), teacher-forced so that a
// near-tie cannot change which tokens are fed (GEMMA4.md, "Decoding with a cache").
//  - equivalence/<tiny model>: the four tiny models (E2B, E4B, 31B, 26B-A4B in miniature: KV
//    sharing, K=V global layers, MoE; window 4), 2 rows of a 12-token prompt (row 1 left-padded),
//    prefilled in chunks of 5 (5 + 5 + 2), then 8 tokens one step each: 20 indices, five windows.
//    Truth: the reference's full forward in fp32 over all 20 tokens at the same positions, what
//    decoding must equal. Judged: the logits of every real token (a padding query is don't-care).
//  - speculative/<e2b, 26b-a4b>: the same, but the 8 tokens after the prompt come as speculative
//    drafts (kDrafts: 3 fed, 2 accepted; 4, 1; 2, 2; 4, 3), each fed as one step with wrong guesses
//    after its accepted tokens, which KvCacheOps::rollback takes back. With window 4 every draft
//    crosses a window edge; a ring cache of window + 3 slots (the Python one) wraps on every draft,
//    the cuda one (19 rows) inside the last. A backend whose cache has no rollback: not supported.
//  - transformers/<case>: the decode goldens (golden/transformers/<case>/decode.f32.h5, FORMAT.md):
//    the golden's tokens teacher-forced, prompt in one piece; each step's scores against
//    transformers', and what each storing layer's cache holds after the prompt against
//    transformers' cache (padding entries don't-care).
//  - kernel/<geometry>: the KV cache ops alone at the released head dims (checks_decode_kernel.cpp).
// Rule (golden/tolerance.h): f32, check_fp32 against the truth. bf16/f16, the family rule against
// the fp32 truth, with FORMAT.md's baseline family run the same way in the same dtype: the
// reference's full forward without a cache, its cached decode, and the cached decode of every
// in-tree legitimate variant (with its own KV cache ops where it has them), leaving out a member
// with the candidate's name. A family and not one run, because MoE routing flips on near-ties in
// bf16/f16 move the logits of correct implementations by far more than rounding elsewhere does.
// Both errors, the candidate's and the family's largest, are in every row.
// A quantized cache (KvCacheOps::quantization: fp8 e4m3): its truth is the reference's decoding in
// fp32 through the reference's cache quantized the same way (quantize_on_write), and its family
// each member's decoding through its own cache quantized the same way (no full forward: it has no
// cache to quantize); so e4m3's rounding is in the truth and what fails is the cache's own error.
// Beside the verdict, its envelope (golden/FORMAT.md, "Quantized subjects"; reported, not judged):
// KLD, top-1 agreement and dp of its logits against the float truth (envelope/...), and of the
// quantized truth's (quantization/...: what e4m3 alone costs), over all judged positions, the
// prompt's (prefill) and the steps' (decode).
// MoE near-ties (bf16/f16): a token whose top-k routing the truth decides by a logit gap smaller
// than a correct same-dtype run may move it is routed either way by correct code, and its logits
// then differ by whole experts (measured: a plain PyTorch ring cache with SDPA on the CPU flipped
// one token of 26b-a4b, max 4.9 against a family's 0.33). Such tokens are don't-care: their
// logits, and their cache entries. A near-tie, per MoE layer: the reference's own same-dtype full
// forward routes the token otherwise than the truth, or the truth's gap between its k-th and
// (k+1)-th router logit is under 8e, e the RMS router-logit error of that run over the tokens it
// routed alike (the rule lets a candidate's errors reach 4x the family's, k_max, and a gap is the
// difference of two logits). A row "routing" gives the count; f32 has none.
#include <ATen/ATen.h>

#include <memory>

#include "conformance/check.h"
#include "conformance/compare.h"
#include "conformance/tiny_models.h"
#include "golden/decode_golden.h"
#include "golden/model_cases.h"
#include "golden/quantized_subject.h"
#include "reference/files.h"
#include "reference/generate.h"
#include "reference/hf_checkpoint.h"
#include "reference/kv_quantization.h"

namespace gemma4::conformance {
namespace {

using golden::TensorMap;
using torch::Tensor;

constexpr int64_t kPrompt = 12, kNewTokens = 8, kChunk = 5;
const std::vector<Draft> kDrafts{{3, 2}, {4, 1}, {2, 2}, {4, 3}};  // accepts kNewTokens in all

enum class Feeding { kPlain, kSpeculative };

// One implementation's way of decoding: its name, ops and KV cache ops (`owned` keeps cache ops
// made for it alive).
struct Decoder {
  std::string name;
  GenerateOptions options;
  std::shared_ptr<const KvCacheOps> owned;
};

KvQuantization kv_quantization(const SuiteOptions& o) {
  return o.backend.kv_cache.make ? o.backend.kv_cache.quantization : KvQuantization::kNone;
}

// `d` decoding through its cache (the reference's when it has none) quantized as q stores.
void quantize_cache(Decoder& d, KvQuantization q) {
  if (q == KvQuantization::kNone) return;
  d.owned = std::make_shared<const KvCacheOps>(
      quantize_on_write(d.options.cache_ops ? *d.options.cache_ops : reference_kv_cache_ops(), q));
  d.options.cache_ops = d.owned.get();
  d.name += std::string(" + ") + kv_quantization_name(q);
}

// The truth's decoder of a quantized candidate: the reference through the quantized reference cache.
Decoder quantized_truth_decoder(KvQuantization q, int64_t chunk, KvKeyConvention kv_key) {
  Decoder d{"truth", {}, nullptr};
  d.options.prefill_chunk = chunk;
  d.options.kv_key = kv_key;
  quantize_cache(d, q);
  return d;
}

Decoder candidate_decoder(const SuiteOptions& o, int64_t chunk, KvKeyConvention kv_key) {
  Decoder d{o.backend.name, {}, nullptr};
  d.options.prefill_chunk = chunk;
  d.options.kv_key = kv_key;
  d.options.ops = &o.backend.ops;
  if (o.backend.kv_cache.make) d.options.cache_ops = &o.backend.kv_cache;
  return d;
}

// The cached decoders of the baseline family (bf16/f16 only): the reference, then the variants;
// a candidate is never its own baseline.
std::vector<Decoder> family_decoders(const SuiteOptions& o, int64_t chunk, KvKeyConvention kv_key) {
  if (o.dtype == torch::kFloat32) return {};
  std::vector<Decoder> family;
  if (o.backend.name != "reference") family.push_back({"reference", {}, nullptr});
  for (const golden::FamilyMember& m : baseline_family(o.device, o.dtype)) {
    if (m.name == o.backend.name) continue;
    Decoder d{m.name, {}, nullptr};
    d.options.ops = m.forward.ops;
    d.options.cache_ops = m.kv_cache;
    family.push_back(d);
  }
  for (Decoder& d : family) {
    d.options.prefill_chunk = chunk, d.options.kv_key = kv_key;
    quantize_cache(d, kv_quantization(o));
  }
  return family;
}

// The full forward (no cache) over every token of `tokens` at decoding's positions: its logits
// (float32, CPU) and each MoE layer's router logits.
struct FullForward {
  Tensor logits;
  std::vector<Tensor> router_logits;
};

FullForward full_forward(const Model& model, const Tensor& tokens, const Tensor& prompt_mask) {
  torch::NoGradGuard no_grad;
  const int64_t T = tokens.size(1), S = prompt_mask.size(1);
  const Tensor mask = at::cat({prompt_mask, at::ones({tokens.size(0), T - S}, prompt_mask.options())}, 1);
  ForwardOptions f;
  f.keep_hidden_states = false;
  f.keep_layer_outputs = true;
  ForwardInputs in{tokens, mask, Tensor(), continued_positions(prompt_mask, T)};
  ForwardOutputs out = model.forward(in, f);
  return {out.logits.to(torch::kFloat32).cpu(), out.router_logits};
}

// [B, T] bool: the tokens whose routing is a near-tie (see the top of the file), from the truth's
// and the same-dtype run's router logits; all false without MoE layers or in f32.
Tensor near_ties(const FullForward& truth, const FullForward& same_dtype, int64_t top_k, torch::ScalarType dtype) {
  const int64_t B = truth.logits.size(0), T = truth.logits.size(1);
  Tensor ties = at::zeros({B, T}, at::kBool);
  if (dtype == torch::kFloat32) return ties;
  for (size_t l = 0; l < truth.router_logits.size(); ++l) {
    const Tensor t = truth.router_logits[l].cpu(), d = same_dtype.router_logits[l].cpu();
    const Tensor sorted = std::get<0>(t.topk(top_k + 1, -1));
    const Tensor gap = sorted.select(-1, top_k - 1) - sorted.select(-1, top_k);
    // Tokens the same-dtype run routed like the truth: their router-logit error is rounding alone
    // (a flipped token's is whole experts), so its RMS over them is the layer's e.
    const Tensor agree = std::get<0>(std::get<1>(t.topk(top_k, -1)).sort(-1))
                             .eq(std::get<0>(std::get<1>(d.topk(top_k, -1)).sort(-1)))
                             .all(-1);
    const double e = (d - t).index({agree}).pow(2).mean().sqrt().item<double>();
    ties |= (gap < 8 * e | ~agree).view({B, T});
  }
  return ties;
}

using EnvelopeSplits = std::vector<std::pair<golden::EnvelopeSplit, Tensor>>;

// judged [..., 1] split at `first_step` along dim: before it the prefill, from it the decode steps.
EnvelopeSplits prefill_and_decode(const Tensor& judged, int64_t dim, int64_t first_step) {
  const Tensor all = judged.squeeze(-1).to(at::kBool);
  const Tensor step = at::arange(all.size(dim)).view({dim == 0 ? -1 : 1, dim == 0 ? 1 : -1}).expand_as(all);
  return {{golden::EnvelopeSplit::kAll, all},
          {golden::EnvelopeSplit::kPrefill, all & (step < first_step)},
          {golden::EnvelopeSplit::kDecode, all & (step >= first_step)}};
}

void report_envelope(Reporter& r, const Tensor& float_truth, const Tensor& quantized_truth, const Tensor& candidate,
                     const EnvelopeSplits& splits, const std::string& against) {
  for (const auto& [who, logits] : {std::pair{"envelope", candidate}, {"quantization", quantized_truth}}) {
    for (const golden::EnvelopeFigures& f : golden::envelope_over(float_truth, logits, splits)) {
      const std::string name = std::string(who) + "/" + golden::envelope_split_name(f.split) + "/";
      const std::string detail = "against " + against + ", " + std::to_string(f.tokens) + " positions";
      for (const auto& [metric, value] : golden::envelope_metrics(f)) r.measure(name + metric, value, detail);
    }
  }
}

// The routing row: how many real tokens are near-ties (a pass row: information, not a verdict; a
// count with bound 0, so that calibrate's separation table does not read n / all as an error ratio).
void record_ties(Reporter& r, const Tensor& ties, const Tensor& real) {
  const int64_t n = (ties & real).sum().item<int64_t>(), all = real.sum().item<int64_t>();
  r.record("routing", "near_tie_tokens", double(n), 0.0, true,
           std::to_string(n) + " of " + std::to_string(all) + " real tokens routed on a near-tie: don't-care" +
               (n == all ? "; nothing is judged in this dtype (f32 judges every token)" : ""));
}

void check_equivalence(const std::string& name, Feeding feeding, const SuiteOptions& o, Reporter& r) {
  const TinyModel tiny = tiny_model(name, o);
  const std::string why = unsupported(o, tiny.config);
  if (!why.empty()) return r.not_supported(why);
  if (feeding == Feeding::kSpeculative && o.backend.kv_cache.make && !o.backend.kv_cache.rollback) {
    return r.not_supported("the backend's KV cache has no rollback (speculative decoding)");
  }
  auto decode = [&](const Model& m, const Tensor& tokens, const Tensor& prompt_mask, const GenerateOptions& options) {
    return feeding == Feeding::kPlain ? decode_logits(m, tokens, prompt_mask, kPrompt, options)
                                      : speculative_logits(m, tokens, prompt_mask, kPrompt, options, kDrafts);
  };
  const TensorMap inputs = golden::make_model_inputs(tiny.config, 2, kPrompt + kNewTokens, 11);
  const Tensor tokens = inputs.at("input_ids");
  const Tensor prompt_mask = inputs.at("attention_mask").slice(1, 0, kPrompt);
  const Tensor real = inputs.at("attention_mask").to(at::kBool);  // padding queries are don't-care

  const Model model(tiny.config, tiny.weights);
  const Model model32(tiny.config,
                      golden::weights_from_map(tiny.config, golden::weights_to_map(tiny.config, tiny.weights),
                                               torch::kFloat32, o.device));
  const FullForward truth = full_forward(model32, tokens, prompt_mask);
  // The same-dtype full forward serves the family and the near-ties, which f32 has neither of.
  const bool reduced = o.dtype != torch::kFloat32;
  const FullForward same_dtype = reduced ? full_forward(model, tokens, prompt_mask) : FullForward{};
  const Tensor ties = near_ties(truth, same_dtype, tiny.config.top_k_experts, o.dtype);
  if (tiny.config.enable_moe_block) record_ties(r, ties, real);
  const Tensor judged = (real & ~ties).to(at::kLong).unsqueeze(-1);  // [B, T, 1]
  const KvKeyConvention key = KvKeyConvention::kLayerType;
  const Tensor candidate = decode(model, tokens, prompt_mask, candidate_decoder(o, kChunk, key).options);
  const std::string check = feeding == Feeding::kPlain ? "equivalence" : "speculative";
  const KvQuantization q = kv_quantization(o);
  Tensor truth_logits = truth.logits;
  if (q != KvQuantization::kNone) {
    const Decoder t = quantized_truth_decoder(q, kChunk, key);
    truth_logits = shared_result<Tensor>("decode/" + check + "/" + name + "|" + t.name, o, [&] {
      return decode(model32, tokens, prompt_mask, t.options);
    });
  }
  Members family;
  for (const Decoder& d : family_decoders(o, kChunk, key)) {
    family.emplace_back(d.name, shared_result<Tensor>("decode/" + check + "/" + name + "|" + d.name, o, [&] {
                          return decode(model, tokens, prompt_mask, d.options);
                        }));
  }
  if (!family.empty() && q == KvQuantization::kNone) family.emplace_back("reference full forward", same_dtype.logits);
  r.record("logits", family_verdict(candidate, truth_logits, family, judged, o.dtype));
  if (q != KvQuantization::kNone) {
    report_envelope(r, truth.logits, truth_logits, candidate, prefill_and_decode(judged, 1, kPrompt),
                    "the reference's fp32 full forward");
  }
}

// The golden's judged positions of `name` less the near-tie tokens: scores [N, B, V] by the token
// that chose them (index S - 1 + i), cache entries [B, Hkv, T, D] by their own index.
Tensor judged_without_ties(const golden::DecodeGolden& g, const std::string& name, const Tensor& ties) {
  const int64_t S = g.prompt_length(), N = g.max_new_tokens;
  const Tensor keep = ~ties;  // [B, S + N]
  if (name == "scores") return keep.slice(1, S - 1, S - 1 + N).transpose(0, 1).unsqueeze(-1).to(at::kLong);
  const int64_t first = g.cache_first.at(golden::cache_layer(name));
  const int64_t entries = g.expected.at(name).size(2);
  Tensor judged = keep.slice(1, first, first + entries).view({keep.size(0), 1, entries, 1}).to(at::kLong);
  const auto file_mask = g.judged.find(name);
  return file_mask == g.judged.end() ? judged : judged * file_mask->second;
}

}  // namespace

void check_decode_golden(const std::string& path, bool speculative, const SuiteOptions& o, Reporter& r) {
  const golden::DecodeGolden g = golden::read_decode_golden(path);
  const Config config = parse_config(g.config);
  const std::string why = unsupported(o, config);
  if (!why.empty()) return r.not_supported(why);
  if (speculative && o.backend.kv_cache.make && !o.backend.kv_cache.rollback) {
    return r.not_supported("the backend's KV cache has no rollback (speculative decoding)");
  }
  const std::vector<Draft>* drafts = speculative ? &kDrafts : nullptr;
  const Model model = golden::decode_model(g, o.dtype, o.device);
  const KvQuantization q = kv_quantization(o);
  TensorMap truth = g.expected;  // transformers' float cache; a quantized cache's truth is recomputed
  if (q != KvQuantization::kNone) {
    const Decoder t = quantized_truth_decoder(q, 0, g.kv_key);
    truth = shared_result<TensorMap>(std::string(speculative ? "decode/speculative|" : "decode/golden|") + path + "|" +
                                         t.name, o, [&] {
      return golden::decode_candidate(g, golden::decode_model(g, torch::kFloat32, o.device), t.options, drafts);
    });
  }
  const TensorMap candidate = golden::decode_candidate(g, model, candidate_decoder(o, 0, g.kv_key).options, drafts);
  std::vector<std::pair<std::string, TensorMap>> family;
  for (const Decoder& d : family_decoders(o, 0, g.kv_key)) {
    const std::string key = std::string(speculative ? "decode/speculative|" : "decode/golden|") + path + "|" + d.name;
    family.emplace_back(d.name, shared_result<TensorMap>(key, o, [&] {
                          return golden::decode_candidate(g, model, d.options, drafts);
                        }));
  }
  // Near-ties from the reference's fp32 run (it equals transformers': golden verify) and its same-dtype run.
  const bool reduced = o.dtype != torch::kFloat32;
  const FullForward same_dtype = reduced ? full_forward(model, g.sequences, g.attention_mask) : FullForward{};
  const Tensor ties =
      reduced
          ? near_ties(full_forward(golden::decode_model(g, torch::kFloat32, o.device), g.sequences, g.attention_mask),
                      same_dtype, config.top_k_experts, o.dtype)
          : at::zeros(g.sequences.sizes(), at::kBool);
  const int64_t S = g.prompt_length(), N = g.max_new_tokens;
  if (config.enable_moe_block) {
    record_ties(r, ties, at::cat({g.attention_mask, at::ones({ties.size(0), N}, at::kLong)}, 1).to(at::kBool));
  }
  if (!family.empty() && q == KvQuantization::kNone) {  // no cache: it joins the family for the scores only
    family.push_back(
        {"reference full forward", {{"scores", same_dtype.logits.slice(1, S - 1, S - 1 + N).transpose(0, 1)}}});
  }
  for (const auto& [name, expected] : truth) {
    if (!candidate.count(name)) continue;  // speculative runs give scores only
    const Tensor judged = judged_without_ties(g, name, ties);
    if (judged.sum().item<int64_t>() == 0) continue;  // every position a near-tie: the routing row says so
    Members members;
    for (const auto& [member, results] : family) {
      if (results.count(name)) members.emplace_back(member, results.at(name));
    }
    r.record(name, family_verdict(candidate.at(name), expected, members, judged, o.dtype));
    if (q != KvQuantization::kNone && name == "scores") {  // step 0 is the prompt's last position
      report_envelope(r, g.expected.at("scores"), expected, candidate.at(name), prefill_and_decode(judged, 0, 1),
                      "transformers' fp32 scores");
    }
  }
}

std::vector<Check> decode_checks(const SuiteOptions& o) {
  std::vector<Check> checks;
  for (const std::string& name : tiny_model_names()) {
    checks.push_back({Category::kDecode, "equivalence/" + name, [name](const SuiteOptions& o, Reporter& r) {
                        check_equivalence(name, Feeding::kPlain, o, r);
                      }});
  }
  // Speculative drafts on two of them: KV-shared layers reading a rolled-back cache (e2b) and MoE
  // routing (26b-a4b); the rollback itself is the cache's, the same on every model.
  for (const std::string name : {"e2b", "26b-a4b"}) {
    checks.push_back({Category::kDecode, "speculative/" + name, [name](const SuiteOptions& o, Reporter& r) {
                        check_equivalence(name, Feeding::kSpeculative, o, r);
                      }});
  }
  const std::string transformers = files::join(o.golden_dir, "transformers");
  for (const std::string& name : files::list_directory(transformers)) {
    const std::string path = files::join(files::join(transformers, name), "decode.f32.h5");
    if (!files::is_file(path)) continue;
    checks.push_back({Category::kDecode, "transformers/" + name,
                      [path](const SuiteOptions& o, Reporter& r) { check_decode_golden(path, false, o, r); }});
  }
  for (Check& c : decode_kernel_checks()) checks.push_back(std::move(c));
  return checks;
}

}  // namespace gemma4::conformance
