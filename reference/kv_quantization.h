#pragma once
// fp8 KV caches (KvQuantization, reference/kv_cache.h): the encoding every fp8 cache shares, and
// the truth a quantized cache is judged against. Quantization error is not a bug: a cache that
// stores e4m3 is judged against the reference decoding through a cache that rounds every entry to
// e4m3 the same way (same scales, same granularity, computed in the step's dtype), so that what is
// left is the implementation's own error: a scale taken over the wrong values, a ring whose scales
// lag its codes, K read where V belongs.
#include <torch/types.h>

#include "reference/kv_cache.h"

namespace gemma4 {

constexpr double kE4m3Max = 448.0;  // float8 e4m3fn's largest finite value

// fp32 scales of x [B, H, T, D] under q (not kNone): amax / 448 over the whole tensor [1, 1, 1, 1],
// per head [1, H, 1, 1] or per entry [B, H, T, 1]; an all-zero group gets the smallest normal
// float's scale instead of 0 (its codes are 0 either way).
torch::Tensor fp8_scales(const torch::Tensor& x, KvQuantization q);

// x / scale rounded to e4m3 (to nearest, ties to even), saturating at +-448: kFloat8_e4m3fn.
torch::Tensor fp8_encode(const torch::Tensor& x, const torch::Tensor& scale);
// codes * scale in fp32, then rounded once to dtype.
torch::Tensor fp8_decode(const torch::Tensor& codes, const torch::Tensor& scale, torch::ScalarType dtype);

// `inner` (any cache ops) storing what a cache of `q` gives back: every entry encoded and decoded
// on its write, static scales fixed at each layer's first update. Its quantization is q. The decode
// checks' truth (in fp32) and family (in the suite's dtype) for a quantized candidate.
KvCacheOps quantize_on_write(const KvCacheOps& inner, KvQuantization q);

}  // namespace gemma4
