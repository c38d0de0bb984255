// gemma4-bench: the backends' ops against LibTorch's SDPA and the device's ceilings, with Google
// Benchmark (bench/README.md). Every benchmark is registered at run time, on any machine; those
// that need a GPU skip with "no CUDA device" where there is none.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "bench/case_cache.h"
#include "bench/device.h"
#include "bench/registration.h"
#include "reference/error.h"

namespace {

constexpr int kDefaultRepetitions = 10;
const std::string kBackendLib = "--backend-lib=";
const std::string kRepetitions = "--benchmark_repetitions=";
const std::string kFilter = "--benchmark_filter=";
// Google Benchmark reserves room for each family in turn when the filter is its default "."
// (or "all"), which makes listing or running every benchmark quadratic in their number (about a
// second for ours); ".*" matches the same names without that.
const std::string kMatchAll = kFilter + ".*";

void print_help() {
  std::cout << "gemma4-bench [--backend-lib=PATH]... [google-benchmark flags]\n"
               "  Benchmarks are named op/backend/device/geometry/S/dtype/direction, e.g.\n"
               "  sliding_attention/cuda/cuda/31b/8192/bf16/fwd or layer_moe/reference/cuda/26b-a4b/4096/bf16/fwdbwd,\n"
               "  and ceiling/d2d_copy/cuda/{32MiB,128MiB,1GiB}, ceiling/gemm_bf16/cuda/8192; list them with\n"
               "  --benchmark_list_tests.\n"
               "  --backend-lib=PATH  also measure the plugin backend at PATH (repeatable)\n"
               "  Repetitions: --benchmark_repetitions=N, else $GEMMA4_BENCH_REPETITIONS, else "
            << kDefaultRepetitions << ".\n\n";
  benchmark::PrintDefaultHelp();
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  std::vector<std::string> plugins;
  int repetitions = -1;  // -1: not on the command line
  bool filtered = false;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (starts_with(arg, kBackendLib)) {
      plugins.push_back(arg.substr(kBackendLib.size()));
      continue;  // ours: google-benchmark would reject it
    }
    if (starts_with(arg, kRepetitions)) repetitions = std::atoi(arg.c_str() + kRepetitions.size());
    if (starts_with(arg, kFilter)) {
      filtered = true;
      if (arg == kFilter + "." || arg == kFilter + "all") arg = kMatchAll;
    }
#ifdef GEMMA4_BENCHMARK_MIN_TIME_IS_DOUBLE
    // Google Benchmark < 1.8 takes --benchmark_min_time as a plain number of seconds; accept the
    // 1.8 spelling ("0.5s") too, so one command line works with both.
    if (starts_with(arg, "--benchmark_min_time=") && arg.back() == 's') arg.pop_back();
#endif
    args.push_back(arg);
  }
  // The default goes in as the flag, not as each benchmark's Repetitions(), which would add
  // "/repeats:N" to every name.
  if (repetitions == -1) {
    const char* env = std::getenv("GEMMA4_BENCH_REPETITIONS");
    repetitions = env ? std::atoi(env) : kDefaultRepetitions;
    args.push_back(kRepetitions + std::to_string(repetitions));
  }
  if (!filtered && !std::getenv("BENCHMARK_FILTER")) args.push_back(kMatchAll);
  if (repetitions < 1) {
    std::cerr << "gemma4-bench: repetitions must be at least 1\n";
    return 2;
  }
  std::vector<char*> c_args;
  for (std::string& arg : args) c_args.push_back(arg.data());
  c_args.push_back(nullptr);
  int c_argc = static_cast<int>(args.size());
  benchmark::Initialize(&c_argc, c_args.data(), print_help);
  if (benchmark::ReportUnrecognizedArguments(c_argc, c_args.data())) return 2;

  try {
    const gemma4::bench::Suite suite = gemma4::bench::make_suite(plugins);
    gemma4::bench::register_ceilings();
    gemma4::bench::register_attention_benchmarks(suite);
    gemma4::bench::register_elementwise_benchmarks(suite);
    gemma4::bench::register_moe_benchmarks(suite);
    gemma4::bench::register_layer_benchmarks(suite);
    gemma4::bench::register_decode_benchmarks(suite);
    gemma4::bench::add_run_context(repetitions);
    benchmark::RunSpecifiedBenchmarks();
    gemma4::bench::drop_cached_case();  // before static destruction, while CUDA is up
  } catch (const gemma4::Error& e) {
    std::cerr << "gemma4-bench: " << e.what() << "\n";
    return 1;
  }
  benchmark::Shutdown();
  return 0;
}
