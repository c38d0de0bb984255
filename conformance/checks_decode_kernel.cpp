// decode/kernel/<geometry>: the backend's KV cache ops alone (Backend::kv_cache) at the released
// models' head dims and windows, where a decode kernel runs: the tiny models of decode/equivalence
// have head dims 8 to 32, below any kernel's, so a backend serves them from its fallback.
// Random q/k/v (standard normal, as after the RMS norms) in the suite's dtype, two rows, row 1
// left-padded by 5; a prompt past the window fed in chunks of 384, then steps of 1, 1, 4 and 1
// queries. After every update the step's queries attend to the cache, and a second set of
// queries reads it as a KV-shared layer does. Judged: every real query's output, against the
// reference's cache ops on the same (rounded) inputs in fp32, under the family rule with the family
// (the reference and the variants with cache ops of their own) computing it in the same dtype.
// A quantized cache (fp8): truth and family through their caches quantized the same way
// (quantize_on_write, as checks_decode.cpp).
#include <ATen/ATen.h>

#include "conformance/check.h"
#include "conformance/compare.h"
#include "reference/kv_cache.h"
#include "reference/kv_quantization.h"

namespace gemma4::conformance {
namespace {

using torch::Tensor;

struct KernelCase {
  const char* name;
  LayerType type;
  int64_t q_heads, kv_heads, head_dim, window, prompt;
};

// Fewer heads than the models (a kernel's work per head is what differs), their head dims, windows
// and GQA ratios: 31B's sliding (256, window 1024, 2 q per kv head) and global layers (512, 8 q per
// kv head), E2B's sliding layers (256, window 512, MQA). Prompts past the sliding windows; kept
// short where nothing is trimmed, as the CPU runs this for every family member.
const KernelCase kCases[] = {
    {"31b-sliding", LayerType::kSliding, 4, 2, 256, 1024, 1060},
    {"31b-global", LayerType::kFull, 8, 1, 512, 0, 300},
    {"e2b-sliding", LayerType::kSliding, 4, 1, 256, 512, 560},
};
constexpr int64_t kBatch = 2, kLeftPadding = 5, kPrefillChunk = 384;
const int64_t kSteps[] = {1, 1, 4, 1};

struct Inputs {
  std::vector<Tensor> q, shared_q, k, v;  // per step: q [B, c, Hq, D], k/v [B, Hkv, c, D]
  Tensor padding;                         // [B, T] int64
};

Inputs make_inputs(const KernelCase& c, torch::ScalarType dtype, const torch::Device& device) {
  at::manual_seed(17);
  std::vector<int64_t> sizes;
  for (int64_t a = 0; a < c.prompt; a += kPrefillChunk) sizes.push_back(std::min(kPrefillChunk, c.prompt - a));
  for (int64_t s : kSteps) sizes.push_back(s);
  Inputs in;
  int64_t total = 0;
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  for (int64_t n : sizes) {
    in.q.push_back(at::randn({kBatch, n, c.q_heads, c.head_dim}, opts));
    in.shared_q.push_back(at::randn({kBatch, n, c.q_heads, c.head_dim}, opts));
    in.k.push_back(at::randn({kBatch, c.kv_heads, n, c.head_dim}, opts));
    in.v.push_back(at::randn({kBatch, c.kv_heads, n, c.head_dim}, opts));
    total += n;
  }
  in.padding = at::ones({kBatch, total}, at::kLong);
  in.padding[1].slice(0, 0, kLeftPadding).zero_();
  in.padding = in.padding.to(device);
  return in;
}

// Every step through `ops` (inputs cast to `dtype`): the step's outputs, then the KV-shared
// read's, each [B, T, Hq * D] in float32.
Tensor run(const KvCacheOps& ops, const KernelCase& c, const Inputs& in, torch::ScalarType dtype) {
  const int64_t T = in.padding.size(1);
  const CacheSpec spec{0, c.type, kBatch, c.kv_heads, c.head_dim, c.window, T, dtype, in.padding.device()};
  const std::unique_ptr<LayerKvCache> cache = ops.make(spec);
  std::vector<Tensor> own, shared;
  int64_t start = 0;
  for (size_t s = 0; s < in.q.size(); ++s) {
    const int64_t n = in.q[s].size(1);
    ops.update(*cache, in.k[s].to(dtype), in.v[s].to(dtype), start);
    DecodeAttentionSpec step{c.type, c.window, start, in.padding.slice(1, 0, start + n), false};
    own.push_back(ops.attention(in.q[s].to(dtype), *cache, step).to(torch::kFloat32));
    step.kv_shared = true;
    shared.push_back(ops.attention(in.shared_q[s].to(dtype), *cache, step).to(torch::kFloat32));
    start += n;
  }
  return at::cat({at::cat(own, 1), at::cat(shared, 1)}, 1).cpu();
}

void check_kernel(const KernelCase& c, const SuiteOptions& o, Reporter& r) {
  if (!o.backend.kv_cache.make)
    return r.not_supported("the backend has no KV cache ops (it decodes with the reference's)");
  const std::string why = o.backend.capabilities.unsupported(o.device, o.dtype, c.head_dim, c.window);
  if (!why.empty()) return r.not_supported(why);
  const Inputs in = make_inputs(c, o.dtype, o.device);
  torch::NoGradGuard no_grad;
  // The truth and the family's runs do not depend on the candidate: computed once per process.
  const KvQuantization q = o.backend.kv_cache.quantization;
  const auto like_candidate = [q](const KvCacheOps& ops) { return q == KvQuantization::kNone ? ops : quantize_on_write(ops, q); };
  const std::string check = std::string("decode/kernel/") + c.name + "|" + kv_quantization_name(q) + "|";
  const Tensor truth = shared_result<Tensor>(
      check + "truth", o, [&] { return run(like_candidate(reference_kv_cache_ops()), c, in, torch::kFloat32); });
  const Tensor candidate = run(o.backend.kv_cache, c, in, o.dtype);
  Members family;
  if (o.dtype != torch::kFloat32) {
    if (o.backend.name != "reference") {
      family.emplace_back("reference", shared_result<Tensor>(check + "reference", o, [&] {
                            return run(like_candidate(reference_kv_cache_ops()), c, in, o.dtype);
                          }));
    }
    for (const golden::FamilyMember& m : baseline_family(o.device, o.dtype)) {
      if (!m.kv_cache || m.name == o.backend.name) continue;
      family.emplace_back(m.name, shared_result<Tensor>(check + m.name, o, [&] {
                            return run(like_candidate(*m.kv_cache), c, in, o.dtype);
                          }));
    }
  }
  const Tensor real = in.padding.cpu().repeat({1, 2}).unsqueeze(-1);  // own queries, then the shared read's
  r.record("outputs", family_verdict(candidate, truth, family, real, o.dtype));
}

}  // namespace

std::vector<Check> decode_kernel_checks() {
  std::vector<Check> checks;
  for (const KernelCase& c : kCases) {
    checks.push_back({Category::kDecode, std::string("kernel/") + c.name,
                      [c](const SuiteOptions& o, Reporter& r) { check_kernel(c, o, r); }});
  }
  return checks;
}

}  // namespace gemma4::conformance
