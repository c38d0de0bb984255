#pragma once
// What the suite measures (geometries, backends) and how each benchmark is registered; one
// registration function per benchmark file.
#include <benchmark/benchmark.h>

#include <functional>
#include <string>
#include <vector>

#include "bench/geometry.h"
#include "impl/backend.h"

namespace gemma4::bench {

struct Suite {
  std::vector<Geometry> geometries;
  std::vector<impl::Backend> backends;  // every built-in backend except faulty-*, then the plugins
};

// Loads the geometries, the built-in backends and the plugins at `plugin_paths`
// (impl::load_plugin; throws gemma4::Error naming a plugin that cannot be loaded).
Suite make_suite(const std::vector<std::string>& plugin_paths);

// Registers `run` as `name` with manual time (timing.h), milliseconds. The console shows only the
// aggregates (mean, median, stddev, cv of the --benchmark_repetitions repetitions; the median is the
// figure); the --benchmark_out report holds every repetition too (what bench-compare tests).
void register_benchmark(const std::string& name, std::function<void(benchmark::State&)> run);

// The same for a backend's case: where `unsupported` (Capabilities::unsupported's reason) is not
// empty, `name` is registered all the same and skips with "not supported: the <backend> backend's
// capabilities exclude <reason>".
void register_backend_benchmark(const std::string& name, const impl::Backend& backend, const std::string& unsupported,
                                std::function<void(benchmark::State&)> run);

void register_attention_benchmarks(const Suite& suite);
void register_elementwise_benchmarks(const Suite& suite);
void register_moe_benchmarks(const Suite& suite);
void register_layer_benchmarks(const Suite& suite);
void register_ceilings();
void register_decode_benchmarks(const Suite& suite);

}  // namespace gemma4::bench
