// op_sweep: the backend's attention, qk_norm_rope and geglu ops against the reference's on a table
// of small seeded cases, output and every input's gradient. The golden category exercises the ops
// only through a few tiny committed cases; this one covers the geometry a fused kernel gets wrong:
// sliding windows smaller than, equal to and larger than S (windows drawn from a seeded generator,
// printed in the case name), odd S, GQA and MQA, K=V global layers, left-padded batches, and on
// CUDA head dims 256 and 512 with S up to 300, so that 64-row and 64-key tiles are crossed and
// partly masked.
//
// Each case is an op case (golden/op_cases.h), the type the committed op goldens use, made into a
// golden in memory on the suite's device and dtype (golden::generate_op_case: expected/ and the
// fp32 truth from the reference op, the baseline family's errors, the don't-care rows) and judged
// exactly as a committed op golden is. A query row that sees no key (left padding longer than its
// band) gets a zero upstream gradient and is judged for finiteness only.
#include <ATen/ATen.h>

#include "conformance/check.h"
#include "conformance/compare.h"
#include "conformance/tiny_models.h"
#include "golden/catalogue.h"
#include "reference/counter_random.h"

namespace gemma4::conformance {
namespace {

using golden::AttentionGeometry;
using golden::OpCase;
using golden::QkNormRopeGeometry;

constexpr uint64_t kSeed = 2026;

AttentionGeometry sliding(int64_t window, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int64_t B,
                          std::vector<int64_t> left_padding = {}) {
  return {LayerType::kSliding, window, B, S, Hq, Hkv, D, std::move(left_padding), false};
}

// A window smaller than ("lt", in [2, S - 1]), equal to ("eq") or larger than ("gt", in [S + 1, 2S])
// S, drawn from a seeded generator (counter_integers: the same on every machine) whose stream is
// named after the rest of the case. Not 1: a query that sees only itself has dQ = dK = 0 exactly
// (its softmax is constant), a tensor of zeros that no floor scales, and FlashAttention-style
// backward passes (dS = P (dP - rowsum(dO O))) leave rounding noise there that would be judged
// against a bound of 0.
AttentionGeometry random_sliding(const std::string& relation, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int64_t B,
                                 std::vector<int64_t> left_padding = {}) {
  AttentionGeometry g = sliding(0, S, Hq, Hkv, D, B, std::move(left_padding));
  auto draw = [&](int64_t lo, int64_t hi) {
    const std::string stream = "window/" + relation + "/" + golden::attention_case(g).name;
    return lo + counter_integers(kSeed, stream, {1}, hi - lo + 1).item<int64_t>();
  };
  g.window = relation == "lt" ? draw(2, S - 1) : relation == "eq" ? S : draw(S + 1, 2 * S);
  return g;
}

AttentionGeometry full(int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int64_t B, std::vector<int64_t> left_padding = {},
                       bool k_eq_v = false) {
  return {LayerType::kFull, 0, B, S, Hq, Hkv, D, std::move(left_padding), k_eq_v};
}

std::vector<AttentionGeometry> attention_geometries(bool cuda) {
  std::vector<AttentionGeometry> cases = {
      random_sliding("lt", 37, 4, 2, 16, 2),
      random_sliding("eq", 37, 4, 2, 16, 2),
      random_sliding("gt", 37, 4, 2, 16, 1),
      random_sliding("lt", 77, 8, 2, 64, 1),
      random_sliding("lt", 129, 4, 1, 16, 1),  // MQA
      full(77, 8, 2, 64, 1),
      full(37, 4, 1, 64, 1, {}, /*k_eq_v=*/true),
      // Left padding: rows 0..4 of batch row 1 see only padding keys (don't-care).
      random_sliding("lt", 37, 4, 2, 16, 2, {0, 5}),
      // Padding longer than the window: 30 rows that see no key, and rows whose window is partly padding.
      sliding(7, 37, 4, 2, 16, 2, {3, 30}),
      full(77, 4, 2, 64, 2, {0, 40}),
  };
  if (cuda) {
    // The released head dims, S up to 300: 64-row/64-key tiles crossed, skipped and partly masked.
    for (AttentionGeometry g : {
             random_sliding("lt", 300, 8, 2, 256, 2),
             random_sliding("eq", 257, 8, 2, 256, 1),
             random_sliding("gt", 193, 8, 2, 256, 1),
             sliding(64, 191, 4, 1, 256, 1),  // one tile wide, MQA
             random_sliding("lt", 300, 8, 2, 256, 2, {0, 100}),
             full(257, 8, 2, 512, 1),
             full(77, 4, 1, 512, 1),
             full(300, 8, 1, 512, 1, {}, /*k_eq_v=*/true),
             full(300, 8, 2, 512, 2, {7, 150}),  // 150 rows that see no key: more than two tiles
             // More work tiles than an H100 or H200 has SMs (132): 288 and 200 query blocks, so
             // the persistent forward's CTAs take most of theirs from its work queue.
             random_sliding("lt", 1100, 16, 2, 256, 2),
             full(640, 20, 4, 512, 1, {}, /*k_eq_v=*/true),
         }) {
      cases.push_back(g);
    }
  }
  return cases;
}

std::vector<QkNormRopeGeometry> qk_norm_rope_geometries(bool cuda) {
  std::vector<QkNormRopeGeometry> cases = {
      {false, false, false, 2, 37, 4, 2, 16},
      {true, false, false, 1, 37, 4, 2, 64},
      {true, true, false, 2, 37, 4, 1, 64},   // K=V
      {false, false, true, 2, 37, 4, 0, 16},  // KV-shared
      {true, true, false, 2, 37, 4, 1, 64, /*fp32_norm_weights=*/true},
  };
  if (cuda) {
    for (QkNormRopeGeometry g : {
             QkNormRopeGeometry{false, false, false, 2, 300, 8, 2, 256},
             QkNormRopeGeometry{true, false, false, 1, 129, 8, 2, 512},
             QkNormRopeGeometry{true, true, false, 1, 257, 8, 1, 512},
             QkNormRopeGeometry{true, false, true, 1, 257, 8, 0, 512},
             QkNormRopeGeometry{false, false, false, 2, 300, 8, 2, 256, /*fp32_norm_weights=*/true},
             QkNormRopeGeometry{true, true, false, 1, 257, 8, 1, 512, /*fp32_norm_weights=*/true},
             // 18 q heads at D 512: five staged units a token, the last of two rows; 2500 q units,
             // more than an H100's or H200's launch has warps (1584), so the staged kernel's walk
             // steps within a job and carries from units into tokens (1584 % 5 = 4).
             QkNormRopeGeometry{true, false, false, 1, 500, 18, 2, 512},
         }) {
      cases.push_back(g);
    }
  }
  return cases;
}

// "attention/<case>", "qk_norm_rope/<case>", "geglu/<case>": the check names.
std::vector<OpCase> sweep_cases(bool cuda) {
  std::vector<OpCase> cases;
  for (const AttentionGeometry& g : attention_geometries(cuda)) cases.push_back(golden::attention_case(g));
  for (const QkNormRopeGeometry& g : qk_norm_rope_geometries(cuda)) cases.push_back(golden::qk_norm_rope_case(g));
  cases.push_back(golden::geglu_case(2, 37, 48));
  cases.push_back(golden::geglu_case(3, 7, 33));                // an odd element count (693)
  if (cuda) cases.push_back(golden::geglu_case(1, 301, 1031));  // odd too (310331)
  return cases;
}

void check_case(const OpCase& c, const SuiteOptions& o, Reporter& r) {
  const bool sliding = c.params.value("layer_type", std::string()) == layer_type_name(LayerType::kSliding);
  const std::string why =
      o.backend.capabilities.unsupported(o.device, o.dtype, c.params.value("head_dim", int64_t{0}),
                                         sliding ? c.params.value("sliding_window", int64_t{0}) : 0);
  if (!why.empty()) return r.not_supported(why);
  golden::GenerateOptions generate;
  generate.dtype = o.dtype;
  generate.device = o.device;
  generate.seed = counter_integers(kSeed, "seed/" + c.op + "/" + c.name, {1}, int64_t{1} << 62).item<int64_t>();
  generate.generator = "op_sweep";
  generate.family = baseline_family(o.device, o.dtype);
  const golden::GoldenCase g = golden::generate_op_case(c, generate);
  report(golden::judge(g, golden::recompute(g, o.device, backend_ops(o)), o.backend.name), r);
}

}  // namespace

std::vector<Check> op_sweep_checks(const SuiteOptions& o) {
  std::vector<Check> checks;
  for (const OpCase& c : sweep_cases(o.device.is_cuda())) {
    checks.push_back(
        {Category::kOpSweep, c.op + "/" + c.name, [c](const SuiteOptions& o, Reporter& r) { check_case(c, o, r); }});
  }
  return checks;
}

}  // namespace gemma4::conformance
