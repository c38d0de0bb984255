// The faulty backends of the real-size bug classes: the global layers windowed (faulty_ops.cpp),
// the attention sink lost once the sliding ring wraps (faulty_cache_bugs.cpp), and the bf16
// accumulators of RMSNorm and of the projections (faulty_accumulators.cpp). Each replaces exactly
// the part it names, its bug is real there (it differs from the reference where the bug lives),
// confined (equal where it cannot show), and the accumulators' gradients are the exact ops'.
// Whether the suite catches them is calibrate's test.
#include <gtest/gtest.h>

#include "impl/backend.h"
#include "impl/faulty/faulty_backends.h"
#include "reference/ops.h"
#include "reference/tests/test_support.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

using test::uniform;

// Integers of -bound .. bound, as fp32.
Tensor integers(std::vector<int64_t> shape, int64_t bound, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(-bound, bound + 1, shape).to(torch::kFloat32);
}

// Values k / 8 for k in -8 .. 8: every product is a multiple of 1/64 and sums of up to 16 of them
// are exact in fp32 in any order, so a result depends only on where it is rounded to bf16.
Tensor eighths(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(-8, 9, shape).to(torch::kFloat32) / 8;
}

struct Declared {
  const char* backend;
  std::vector<std::string> parts;
  std::vector<Category> fails_in;
  bool below_reduced_precision;  // measured at real size: FORMAT.md, "Power at real size"
};

TEST(FaultyRealSizeBugs, EachReplacesExactlyItsPartAndDeclaresWhereItFails) {
  const Declared cases[] = {
      {"faulty-global-window",
       {"attention", "kv_cache"},
       {Category::kGolden, Category::kOpSweep, Category::kDecode, Category::kRealSize},
       false},
      {"faulty-decode-sink-lost-after-wrap", {"kv_cache"}, {Category::kDecode, Category::kRealSize}, false},
      {"faulty-rms-norm-sum-squares-bf16", {"rms_norm"}, {Category::kRealSize}, false},
      {"faulty-projection-bf16-accumulate", {"linear"}, {Category::kRealSize}, true},
  };
  for (const Declared& c : cases) {
    SCOPED_TRACE(c.backend);
    EXPECT_EQ(replaced_parts(find_backend(c.backend)), c.parts);
    EXPECT_EQ(find_backend(c.backend).fails_in, c.fails_in);
    EXPECT_EQ(find_backend(c.backend).below_reduced_precision, c.below_reduced_precision);
  }
  EXPECT_TRUE(replaced_parts(find_backend("reference")).empty());
}

// ---- faulty-global-window: the full forward's attention op.

struct WindowCase {
  const char* what;
  LayerType type;
  int64_t window, S;
  bool differs;
};

TEST(FaultyRealSizeBugs, GlobalWindowOnlyOnFullLayersLongerThanTheWindow) {
  const WindowCase cases[] = {
      {"full layer longer than the window", LayerType::kFull, 4, 12, true},
      {"sliding layer", LayerType::kSliding, 4, 12, false},
      {"full layer as long as the window", LayerType::kFull, 12, 12, false},
      {"full layer shorter than the window", LayerType::kFull, 16, 12, false},
  };
  for (const WindowCase& c : cases) {
    SCOPED_TRACE(c.what);
    const int64_t B = 2, Hq = 4, Hkv = 2, D = 16;
    const Tensor q = uniform({B, c.S, Hq, D}, 1), k = uniform({B, Hkv, c.S, D}, 2), v = uniform({B, Hkv, c.S, D}, 3);
    const AttentionSpec spec{c.type, c.window, false, Tensor()};
    const Tensor ref = reference_layer_ops().attention(q, k, v, spec);
    const Tensor bad = find_backend("faulty-global-window").ops.attention(q, k, v, spec);
    if (!c.differs) {
      EXPECT_TRUE(torch::equal(ref, bad));
      continue;
    }
    // Queries 0 .. window - 1 see every key either way; the later ones lose the oldest keys.
    EXPECT_TRUE(torch::equal(ref.slice(1, 0, c.window), bad.slice(1, 0, c.window)));
    EXPECT_GT(test::max_abs_diff(ref.slice(1, c.window), bad.slice(1, c.window)), 1e-2);
    // It is the sliding layer's mask, on a full layer.
    const AttentionSpec sliding{LayerType::kSliding, c.window, false, Tensor()};
    EXPECT_TRUE(torch::equal(bad, reference_layer_ops().attention(q, k, v, sliding)));
  }
}

// ---- Decoding: a cache of `held` entries (indices 0 .. held - 1), one step of c queries at its end.

struct Step {
  Tensor q;
  std::unique_ptr<LayerKvCache> cache;
  DecodeAttentionSpec spec;
};

Step decode_step(const KvCacheOps& ops, LayerType type, int64_t window, int64_t held, int64_t c, int64_t pad) {
  const int64_t B = 2, Hq = 4, Hkv = 2, D = 16;
  CacheSpec cache_spec;
  cache_spec.type = type;
  cache_spec.batch = B, cache_spec.kv_heads = Hkv, cache_spec.head_dim = D, cache_spec.capacity = held;
  cache_spec.window = type == LayerType::kSliding ? window : 0;
  Step s{uniform({B, c, Hq, D}, 4), ops.make(cache_spec), {}};
  ops.update(*s.cache, uniform({B, Hkv, held, D}, 5), uniform({B, Hkv, held, D}, 6), 0);
  Tensor padding = torch::ones({B, held}, torch::kInt64);
  padding[1].slice(0, 0, pad).zero_();  // row 1 left-padded: its first real key is index `pad`
  s.spec = {type, window, held - c, padding, false};
  return s;
}

struct DecodeCase {
  const char* backend;
  const char* what;
  LayerType type;
  int64_t window, held, c;
  bool differs;
};

TEST(FaultyRealSizeBugs, DecodeBugsOnlyOnGlobalLayersPastTheWindow) {
  const DecodeCase cases[] = {
      {"faulty-global-window", "global, context past the window", LayerType::kFull, 4, 10, 1, true},
      {"faulty-global-window", "global, context within the window", LayerType::kFull, 16, 10, 1, false},
      {"faulty-global-window", "sliding", LayerType::kSliding, 4, 10, 1, false},
      {"faulty-decode-sink-lost-after-wrap", "global, ring wrapped", LayerType::kFull, 4, 10, 1, true},
      {"faulty-decode-sink-lost-after-wrap", "global, a step of 3 after the wrap", LayerType::kFull, 4, 10, 3, true},
      {"faulty-decode-sink-lost-after-wrap", "global, ring not wrapped", LayerType::kFull, 10, 10, 1, false},
      {"faulty-decode-sink-lost-after-wrap", "sliding, ring wrapped", LayerType::kSliding, 4, 10, 1, false},
  };
  for (const DecodeCase& c : cases) {
    SCOPED_TRACE(std::string(c.backend) + ": " + c.what);
    const KvCacheOps& ref = reference_kv_cache_ops();
    const Step a = decode_step(ref, c.type, c.window, c.held, c.c, 3);
    const Step b = decode_step(find_backend(c.backend).kv_cache, c.type, c.window, c.held, c.c, 3);
    const Tensor expected = ref.attention(a.q, *a.cache, a.spec);
    const Tensor got = find_backend(c.backend).kv_cache.attention(b.q, *b.cache, b.spec);
    if (c.differs) {
      EXPECT_GT(test::max_abs_diff(expected, got), 1e-3);
    } else {
      EXPECT_TRUE(torch::equal(expected, got));
    }
  }
}

// Past the wrap, a global layer's step is the reference's with each row's first real key masked
// as padding: index 0 in the unpadded row, index 3 in the left-padded one.
TEST(FaultyRealSizeBugs, SinkLostIsEachRowsFirstRealKey) {
  const KvCacheOps& bad = find_backend("faulty-decode-sink-lost-after-wrap").kv_cache;
  const Step s = decode_step(bad, LayerType::kFull, 4, 10, 2, 3);
  DecodeAttentionSpec sinkless = s.spec;
  sinkless.padding = s.spec.padding.clone();
  sinkless.padding.index_put_({0, 0}, 0);
  sinkless.padding.index_put_({1, 3}, 0);
  EXPECT_TRUE(torch::equal(bad.attention(s.q, *s.cache, s.spec),
                           reference_kv_cache_ops().attention(s.q, *s.cache, sinkless)));
}

// A prefill through the cache longer than the ring: the queries before index `window` still see
// the sink, the later ones do not.
TEST(FaultyRealSizeBugs, SinkLostFromTheQueryThatWrapsTheRing) {
  const int64_t window = 4, S = 10;
  const KvCacheOps& ref = reference_kv_cache_ops();
  const Step a = decode_step(ref, LayerType::kFull, window, S, S, 0);
  const Step b = decode_step(find_backend("faulty-decode-sink-lost-after-wrap").kv_cache, LayerType::kFull, window, S, S, 0);
  const Tensor expected = ref.attention(a.q, *a.cache, a.spec);
  const Tensor got = find_backend("faulty-decode-sink-lost-after-wrap").kv_cache.attention(b.q, *b.cache, b.spec);
  EXPECT_TRUE(torch::equal(expected.slice(1, 0, window), got.slice(1, 0, window)));
  EXPECT_GT(test::max_abs_diff(expected.slice(1, window), got.slice(1, window)), 1e-3);
}

// ---- faulty-rms-norm-sum-squares-bf16

TEST(FaultyRealSizeBugs, RmsNormSumOfSquaresExactWhereBf16HoldsEveryPartialSum) {
  // x = +-1: the partial sums are the integers 1 .. H, exact in bf16 up to 256.
  for (int64_t H : {8, 64, 256}) {
    SCOPED_TRACE(H);
    torch::manual_seed(H);
    const Tensor x = torch::randint(0, 2, {3, 5, H}).to(torch::kFloat32) * 2 - 1, w = 1 + uniform({H}, 1, 0.5);
    const auto& bad = find_backend("faulty-rms-norm-sum-squares-bf16").ops.rms_norm;
    EXPECT_TRUE(torch::equal(bad(x, w, 1e-6), reference_layer_ops().rms_norm(x, w, 1e-6)));
    EXPECT_TRUE(torch::equal(bad(x, Tensor(), 1e-6), reference_layer_ops().rms_norm(x, Tensor(), 1e-6)));
  }
}

// The error relative to the exact norm: bf16's own rounding over a short row, a stalled sum over a
// long one (each square below half the spacing of a sum past 256 of them).
double rms_norm_error(int64_t H, torch::ScalarType dtype) {
  const Tensor x = uniform({4, 8, H}, 2).to(dtype), w = (1 + uniform({H}, 3, 0.5)).to(dtype);
  const Tensor ref = reference_layer_ops().rms_norm(x, w, 1e-6).to(torch::kFloat32);
  const Tensor bad = find_backend("faulty-rms-norm-sum-squares-bf16").ops.rms_norm(x, w, 1e-6);
  EXPECT_EQ(bad.scalar_type(), dtype);
  return ((bad.to(torch::kFloat32) - ref).abs().max() / ref.abs().max()).item<double>();
}

TEST(FaultyRealSizeBugs, RmsNormSumOfSquaresErrorGrowsWithTheWidth) {
  const double narrow = rms_norm_error(32, torch::kFloat32), wide = rms_norm_error(2048, torch::kFloat32);
  EXPECT_GT(narrow, 1e-5);  // far above fp32 rounding, at any width
  EXPECT_LT(narrow, 1e-2);
  EXPECT_GT(wide, 10 * narrow);
  EXPECT_GT(rms_norm_error(2048, torch::kBFloat16), 1e-2);  // a few bf16 spacings and more
}

// ---- faulty-projection-bf16-accumulate

TEST(FaultyRealSizeBugs, ProjectionAccumulatorExactWhereNoStepRounds) {
  const auto& bad = find_backend("faulty-projection-bf16-accumulate").ops.linear;
  // Entries -1, 0, 1: every partial sum an integer of at most K = 64, exact in bf16 at every step.
  const Tensor x = integers({2, 5, 64}, 1, 7), w = integers({24, 64}, 1, 8);
  EXPECT_TRUE(torch::equal(bad(x, w), at::linear(x, w)));
  EXPECT_TRUE(torch::equal(bad(x, w), reference_layer_ops().linear(x, w)));
  // K <= 16: one k-step, one rounding to bf16, as a bf16 GEMM's output (its sum is exact here).
  const Tensor xe = eighths({2, 5, 16}, 8).to(torch::kBFloat16), we = eighths({24, 16}, 9).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(bad(xe, we), at::linear(xe, we)));
  // K = 64 from the same kind of entries: four roundings, where the bf16 GEMM rounds once.
  const Tensor xl = eighths({2, 5, 64}, 10).to(torch::kBFloat16), wl = eighths({24, 64}, 11).to(torch::kBFloat16);
  EXPECT_FALSE(torch::equal(bad(xl, wl), at::linear(xl, wl)));
  // An f32 run's accumulator is bf16 too: a single step already rounds (integers of -15 .. 15:
  // exact sums in fp32, up to 3600, most of them not bf16 values).
  const Tensor x16 = integers({2, 5, 16}, 15, 12), w16 = integers({24, 16}, 15, 13);
  EXPECT_TRUE(torch::equal(bad(x16, w16), at::linear(x16, w16).to(torch::kBFloat16).to(torch::kFloat32)));
  EXPECT_FALSE(torch::equal(bad(x16, w16), at::linear(x16, w16)));
}

double projection_error(int64_t K, torch::ScalarType dtype) {
  const Tensor x = uniform({4, 8, K}, 14).to(dtype), w = uniform({32, K}, 15).to(dtype);
  const Tensor truth = at::linear(x.to(torch::kFloat64), w.to(torch::kFloat64));
  const Tensor bad = find_backend("faulty-projection-bf16-accumulate").ops.linear(x, w);
  EXPECT_EQ(bad.scalar_type(), dtype);
  return ((bad.to(torch::kFloat64) - truth).abs().max() / truth.abs().max()).item<double>();
}

TEST(FaultyRealSizeBugs, ProjectionAccumulatorErrorGrowsWithK) {
  const double one_step = projection_error(16, torch::kFloat32), many = projection_error(4096, torch::kFloat32);
  EXPECT_GT(one_step, 1e-4);  // bf16's rounding, in an f32 run
  EXPECT_GT(many, 4 * one_step);
  // In bf16 the GEMM's own single rounding is the baseline.
  const Tensor x = uniform({4, 8, 4096}, 14).to(torch::kBFloat16), w = uniform({32, 4096}, 15).to(torch::kBFloat16);
  const Tensor truth = at::linear(x.to(torch::kFloat64), w.to(torch::kFloat64));
  const Tensor gemm = at::linear(x, w).to(torch::kFloat64);
  const double baseline = ((gemm - truth).abs().max() / truth.abs().max()).item<double>();
  EXPECT_GT(projection_error(4096, torch::kBFloat16), 4 * baseline);
}

// ---- The accumulators' gradients are the exact ops', bit for bit.

TEST(FaultyRealSizeBugs, AccumulatorGradientsAreTheExactOps) {
  for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const Tensor x0 = uniform({2, 5, 48}, 16).to(dtype), w0 = uniform({48}, 17).to(dtype);
    const Tensor p0 = uniform({24, 48}, 18).to(dtype);
    const Tensor dy_norm = uniform({2, 5, 48}, 19).to(dtype), dy_linear = uniform({2, 5, 24}, 20).to(dtype);
    const auto grads = [&](const LayerOps& ops) {
      const Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      const Tensor p = p0.clone().requires_grad_(true), xl = x0.clone().requires_grad_(true);
      ops.rms_norm(x, w, 1e-6).backward(dy_norm);
      ops.linear(xl, p).backward(dy_linear);
      return std::vector<Tensor>{x.grad(), w.grad(), xl.grad(), p.grad()};
    };
    const std::vector<Tensor> ref = grads(reference_layer_ops());
    for (const char* name : {"faulty-rms-norm-sum-squares-bf16", "faulty-projection-bf16-accumulate"}) {
      SCOPED_TRACE(name);
      const std::vector<Tensor> bad = grads(find_backend(name).ops);
      for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(torch::equal(bad[i], ref[i])) << i;
    }
  }
}

}  // namespace
}  // namespace gemma4::impl
