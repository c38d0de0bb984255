#pragma once
// A counter-based random generator whose every value is a pure function of (seed, name, index),
// computed with integer arithmetic and two IEEE roundings, so any machine and any language
// recreates it bit for bit (golden/FORMAT.md, "Generated tensors", has the formula and a
// NumPy version). torch's own generators do not promise that across CPUs or devices.
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace gemma4 {

// Uniform in [center - half_width, center + half_width), float32, on the CPU.
// value[i] = float(center + half_width * (2 * u[i] - 1)), u[i] = (splitmix64(key + (i + 1) * G) >> 40) / 2^24,
// key = splitmix64(seed) ^ fnv1a64(name), G = 0x9E3779B97F4A7C15, all arithmetic mod 2^64.
torch::Tensor counter_uniform(uint64_t seed, const std::string& name, at::IntArrayRef shape, double center,
                              double half_width);

// Uniform integers in [0, bound): int64, on the CPU. value[i] = (splitmix64(key + (i + 1) * G) >> 11) % bound.
torch::Tensor counter_integers(uint64_t seed, const std::string& name, at::IntArrayRef shape, int64_t bound);

}  // namespace gemma4
