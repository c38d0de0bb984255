#include "reference/counter_random.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace gemma4 {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

// Steele, Lea and Flood's SplitMix64 finaliser: a bijection on 64-bit words that mixes well.
uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ULL;
  return h;
}

uint64_t stream_key(uint64_t seed, const std::string& name) { return splitmix64(seed) ^ fnv1a64(name); }

}  // namespace

torch::Tensor counter_uniform(uint64_t seed, const std::string& name, at::IntArrayRef shape, double center,
                              double half_width) {
  torch::Tensor out = at::empty(shape, at::kFloat);
  float* data = out.data_ptr<float>();
  const uint64_t key = stream_key(seed, name);
  at::parallel_for(0, out.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t bits = splitmix64(key + static_cast<uint64_t>(i + 1) * kGolden) >> 40;  // 24 bits
      const double u = static_cast<double>(bits) * 0x1p-24;                                  // exact
      data[i] = static_cast<float>(center + half_width * (2.0 * u - 1.0));
    }
  });
  return out;
}

torch::Tensor counter_integers(uint64_t seed, const std::string& name, at::IntArrayRef shape, int64_t bound) {
  torch::Tensor out = at::empty(shape, at::kLong);
  int64_t* data = out.data_ptr<int64_t>();
  const uint64_t key = stream_key(seed, name);
  for (int64_t i = 0; i < out.numel(); ++i) {
    data[i] = static_cast<int64_t>((splitmix64(key + static_cast<uint64_t>(i + 1) * kGolden) >> 11) %
                                   static_cast<uint64_t>(bound));
  }
  return out;
}

}  // namespace gemma4
