// The cuda backend's KvCacheOps (impl/cuda/kv_cache_op.h: ring caches, the split-K decode kernel
// and its fallbacks) against the reference's (reference/kv_cache.h), on CUDA; skipped without one.
//
// Each case runs a sequence of steps (a prompt chunk, decode steps of 1 and 4 queries, later
// prefill chunks) through three caches fed the same k and v: the candidate in bf16 or fp16, the
// reference in the same dtype, and the reference in fp32 on the same (rounded) inputs, the truth.
// After every step the candidate's attention output must be within a small multiple of the
// same-dtype reference's error against the truth (max-abs 4x, RMS 3x, each plus the dtype's unit
// roundoff times the truth's scale, the golden rule of golden/FORMAT.md), both printed first; a
// KV-shared read (a second q against the same cache) is judged the same way, and the cache's
// contents must equal the reference's bit for bit. Query rows that see no key (left padding) are
// don't-care (golden/FORMAT.md) and not judged. The negative control: the same comparison catches
// a window one too wide.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "impl/cuda/kv_cache_op.h"
#include "reference/error.h"

namespace gemma4::impl::cuda {
namespace {

using torch::Tensor;

struct Case {
  std::string name;
  int64_t batch, q_heads, kv_heads, head_dim;
  int64_t window;                 // 0: a global layer
  std::vector<int64_t> left_pad;  // per batch row; empty: no padding
  std::vector<int64_t> steps;     // queries per step; the first is the prompt chunk at index 0
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all{
      // 31B sliding geometry (D 256, 2 q heads per kv head), the window outgrown: a 300-token
      // prompt, decode steps, a 900-token chunk past the ring, then decode steps again.
      {"sliding1024_hd256_gqa16x8_pad", 2, 16, 8, 256, 1024, {0, 5}, {300, 1, 1, 1, 4, 4, 900, 1, 4, 1}},
      // A small window over left padding (the first queries of row 0 see nothing), the largest
      // kernel step (16) and a chunk longer than the ring.
      {"sliding8_hd256_gqa4x2_pad", 2, 4, 2, 256, 8, {3, 0}, {1, 1, 1, 4, 1, 16, 40, 1, 4, 1}},
      // 31B global geometry (D 512, 8 q heads per kv head: 4 queries make 32 rows), from a single
      // token to a cache of over 2000 entries (many splits).
      {"global_hd512_gqa32x4", 1, 32, 4, 512, 0, {}, {1, 1, 4, 2000, 1, 4, 1}},
      // E4B global geometry (D 512, two kv heads), padded rows (one fully padded prompt row).
      {"global_hd512_gqa8x2_pad", 3, 8, 2, 512, 0, {0, 7, 100}, {64, 1, 4, 8, 1}},
      {"global_hd256_gqa16x8", 2, 16, 8, 256, 0, {}, {17, 1, 4, 300, 1}},
      {"global_hd64_mqa", 2, 4, 1, 64, 0, {0, 2}, {10, 1, 3, 1}},
      {"sliding16_hd128_gqa4x2", 1, 4, 2, 128, 16, {}, {5, 1, 16, 1, 4}},
      // Steps large enough for the 3-stage kernel on every GPU (plan_decode_attention: more than
      // 4096 key tiles a step; the cases above take the 4-stage one where the GPU's bandwidth per
      // SM is high, as on the H200, and the 3-stage one without the L2 prefetch elsewhere): 31B
      // sliding at batch 16 (256 pairs x 33 tiles), 31B global at batch 8 (32 pairs x 132 tiles).
      {"sliding1024_hd256_gqa32x16_b16", 16, 32, 16, 256, 1024, {}, {1100, 1, 4, 1}},
      {"global_hd512_gqa32x4_b8", 8, 32, 4, 512, 0, {0, 0, 0, 9, 0, 0, 0, 0}, {1, 2100, 1, 4}},
      // A head dim the decode kernel is not built for: the fallback path.
      {"sliding16_hd32_fallback", 1, 2, 1, 32, 16, {}, {20, 1, 2}},
  };
  return all;
}

struct Errors {
  double max_abs = 0, rms = 0;
};

Errors errors(const Tensor& x, const Tensor& truth, const Tensor& judged) {
  const Tensor d = (x.to(torch::kFloat64) - truth.to(torch::kFloat64)).masked_select(judged);
  if (d.numel() == 0) return {};
  return {d.abs().max().item<double>(), d.pow(2).mean().sqrt().item<double>()};
}

double unit_roundoff(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

struct StepVerdict {
  std::string what;
  Errors candidate, reference;
  bool within = true;
};

// Runs `c` in `dtype`; the candidate's attention spec gets `window_error` added to its window.
std::vector<StepVerdict> run_case(const Case& c, torch::ScalarType dtype, int64_t window_error = 0,
                                  c10::DeviceIndex device = 0) {
  const torch::Device cuda(torch::kCUDA, device);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(cuda);
  int64_t capacity = 0;
  for (int64_t s : c.steps) capacity += s;
  const LayerType type = c.window > 0 ? LayerType::kSliding : LayerType::kFull;
  CacheSpec spec{7, type, c.batch, c.kv_heads, c.head_dim, c.window, capacity, dtype, cuda};
  CacheSpec spec32 = spec;
  spec32.dtype = torch::kFloat32;
  const KvCacheOps& ref = reference_kv_cache_ops();
  const KvCacheOps& cand = kv_cache_ops();
  auto cache_cand = cand.make(spec), cache_ref = ref.make(spec), cache_truth = ref.make(spec32);

  torch::manual_seed(1234);
  // Scores q.k of a few units, as RMS-normalised q and k give: neither flat nor one-hot.
  const double q_scale = 2.5 / std::sqrt(double(c.head_dim));
  std::vector<StepVerdict> verdicts;
  int64_t start = 0;
  for (size_t step = 0; step < c.steps.size(); ++step) {
    const int64_t n = c.steps[step], end = start + n;
    Tensor padding = at::ones({c.batch, end}, f32.dtype(torch::kInt64));
    for (size_t b = 0; b < c.left_pad.size(); ++b) padding[b].slice(0, 0, std::min(c.left_pad[b], end)).fill_(0);
    const Tensor k = at::randn({c.batch, c.kv_heads, n, c.head_dim}, f32).to(dtype);
    const Tensor v = at::randn({c.batch, c.kv_heads, n, c.head_dim}, f32).to(dtype);
    cand.update(*cache_cand, k, v, start);
    ref.update(*cache_ref, k, v, start);
    ref.update(*cache_truth, k.to(torch::kFloat32), v.to(torch::kFloat32), start);

    // Judged: (row, query) pairs that see at least one token (left padding: index >= the pad).
    Tensor judged = at::ones({c.batch, n, 1}, f32.dtype(torch::kBool));
    for (size_t b = 0; b < c.left_pad.size(); ++b) {
      const int64_t blind = std::clamp<int64_t>(c.left_pad[b] - start, 0, n);
      judged[b].slice(0, 0, blind).fill_(false);
    }
    judged = judged.expand({c.batch, n, c.q_heads * c.head_dim});

    for (bool shared : {false, true}) {  // the layer's own read, then a KV-shared layer's
      const Tensor q = (at::randn({c.batch, n, c.q_heads, c.head_dim}, f32) * q_scale).to(dtype);
      const DecodeAttentionSpec a{type, c.window, start, padding, shared};
      DecodeAttentionSpec wrong = a;
      wrong.sliding_window += window_error;
      const Tensor out_cand = cand.attention(q, *cache_cand, wrong);
      const Tensor out_ref = ref.attention(q, *cache_ref, a);
      const Tensor truth = ref.attention(q.to(torch::kFloat32), *cache_truth, a);
      if (out_cand.sizes() != out_ref.sizes()) {
        throw std::runtime_error(c.name + ": output " + shape_string(out_cand.sizes()) + ", reference " +
                                 shape_string(out_ref.sizes()));
      }
      EXPECT_TRUE(at::isfinite(out_cand).all().item<bool>()) << c.name << " step " << step;
      StepVerdict v;
      v.what = "step " + std::to_string(step) + " (index " + std::to_string(start) + ", " + std::to_string(n) +
               " queries" + (shared ? ", KV-shared read)" : ")");
      v.candidate = errors(out_cand, truth, judged);
      v.reference = errors(out_ref, truth, judged);
      const Errors scale = errors(at::zeros_like(truth), truth, judged);
      const double u = unit_roundoff(dtype);
      v.within = v.candidate.max_abs <= 4 * v.reference.max_abs + u * scale.max_abs &&
                 v.candidate.rms <= 3 * v.reference.rms + u * scale.rms;
      verdicts.push_back(v);
    }
    const CacheContents got = cand.contents(*cache_cand), want = ref.contents(*cache_ref);
    EXPECT_EQ(got.first, want.first) << c.name << " step " << step;
    EXPECT_TRUE(got.k.sizes() == want.k.sizes() && at::equal(got.k, want.k)) << c.name << " step " << step << " k";
    EXPECT_TRUE(got.v.sizes() == want.v.sizes() && at::equal(got.v, want.v)) << c.name << " step " << step << " v";
    start = end;
  }
  return verdicts;
}

std::string dtype_name(torch::ScalarType t) { return t == torch::kBFloat16 ? "bf16" : "fp16"; }

void print(const std::string& label, const StepVerdict& v) {
  std::printf("%-48s %-44s cuda max %.3e rms %.3e | reference max %.3e rms %.3e  %s\n", label.c_str(), v.what.c_str(),
              v.candidate.max_abs, v.candidate.rms, v.reference.max_abs, v.reference.rms, v.within ? "ok" : "OUT");
}

class CudaKvCache : public ::testing::TestWithParam<std::tuple<size_t, torch::ScalarType>> {};

TEST_P(CudaKvCache, MatchesTheReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto [index, dtype] = GetParam();
  const Case& c = cases()[index];
  const std::string label = c.name + " " + dtype_name(dtype);
  for (const StepVerdict& v : run_case(c, dtype)) {
    print(label, v);
    EXPECT_TRUE(v.within) << label << " " << v.what << ": the cuda error exceeds 4x (max) / 3x (rms) the reference's";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaKvCache,
                         ::testing::Combine(::testing::Range<size_t>(0, cases().size()),
                                            ::testing::Values(torch::kBFloat16, torch::kFloat16)),
                         [](const auto& info) {
                           return cases()[std::get<0>(info.param)].name + "_" + dtype_name(std::get<1>(info.param));
                         });

// The negative control: a window one too wide (the candidate sees one key the reference does not)
// must fail the comparison above, in both dtypes. The steps stay short enough (< 16 queries) for
// the ring to still hold the extra key.
TEST(CudaKvCacheControl, AWindowOffByOneIsCaught) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Case control{"sliding8_control", 2, 4, 2, 256, 8, {3, 0}, {12, 1, 1, 4, 1, 8, 1, 4, 1}};
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kFloat16}) {
    int caught = 0;
    for (const StepVerdict& v : run_case(control, dtype, /*window_error=*/1)) {
      print("window+1 " + dtype_name(dtype), v);
      caught += v.within ? 0 : 1;
    }
    EXPECT_GT(caught, 0) << dtype_name(dtype) << ": a window one too wide went unnoticed";
  }
}

// A process that decodes on one GPU and then another: the kernels' shared-memory opt-in is per
// device, so one made on the first GPU only would leave the second's launches failing (the decode
// kernels take up to 133 KB). Every case on device 0, then every case on device 1.
TEST(CudaKvCacheDevices, TheSecondGpuDecodesAfterTheFirst) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "one CUDA device";
  for (c10::DeviceIndex device : {0, 1}) {
    for (const Case& c : cases()) {
      const std::string label = c.name + " bf16 on cuda:" + std::to_string(device);
      for (const StepVerdict& v : run_case(c, torch::kBFloat16, 0, device)) {
        if (!v.within) print(label, v);
        EXPECT_TRUE(v.within) << label << " " << v.what;
      }
    }
  }
}

template <class F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 3 "), std::string::npos) << e.what();
  }
}

TEST(CudaKvCacheErrors, BadInputNamesTheLayer) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA, 0);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(cuda);
  const CacheSpec spec{3, LayerType::kSliding, 1, 2, 64, 4, 8, torch::kBFloat16, cuda};
  const KvCacheOps& ops = kv_cache_ops();
  auto cache = ops.make(spec);
  const Tensor kv = at::randn({1, 2, 2, 64}, bf16);
  expect_error([&] { ops.update(*cache, kv, kv, 3); }, "update at index 3 but the cache ends at 0");
  expect_error([&] { ops.update(*cache, kv.to(torch::kFloat16), kv.to(torch::kFloat16), 0); },
               "is Half but the cache holds BFloat16");
  expect_error([&] { ops.update(*cache, kv.cpu(), kv.cpu(), 0); }, "is on cpu but the cache is on cuda");
  expect_error([&] { ops.update(*cache, kv.slice(1, 0, 1), kv.slice(1, 0, 1), 0); }, "has shape [1, 1, 2, 64]");
  ops.update(*cache, kv, kv, 0);
  expect_error(
      [&] {
        ops.update(*cache, at::randn({1, 2, 7, 64}, bf16), at::randn({1, 2, 7, 64}, bf16), 2);
      },
      "exceeds the capacity 8");
  const Tensor q = at::randn({1, 2, 4, 64}, bf16);
  const Tensor padding = at::ones({1, 2}, torch::TensorOptions().dtype(torch::kInt64).device(cuda));
  expect_error(
      [&] {
        ops.attention(q, *cache, {LayerType::kSliding, 4, 1, padding, true});
      },
      "attention for indices 1..2 but the last update wrote 0..1");
  expect_error(
      [&] {
        ops.make({3, LayerType::kFull, 1, 2, 64, 0, 8, torch::kBFloat16, torch::kCPU});
      },
      "needs a CUDA device");
  expect_error([&] { ops.make({3, LayerType::kFull, 1, 2, 64, 0, 8, torch::kFloat32, cuda}); }, "holds bf16 or fp16");
}

}  // namespace
}  // namespace gemma4::impl::cuda
