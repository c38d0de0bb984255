#include "bench/registration.h"

#include "impl/plugin_loader.h"

namespace gemma4::bench {

Suite make_suite(const std::vector<std::string>& plugin_paths) {
  Suite suite{geometries(), {}};
  // Faulty backends reproduce bugs for the conformance suite; timing them says nothing.
  for (const impl::Backend& b : impl::builtin_backends()) {
    if (b.kind != impl::BackendKind::kFaulty) suite.backends.push_back(b);
  }
  for (const std::string& path : plugin_paths) suite.backends.push_back(impl::load_plugin(path));
  return suite;
}

void register_benchmark(const std::string& name, std::function<void(benchmark::State&)> run) {
  benchmark::RegisterBenchmark(name.c_str(), std::move(run))
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->DisplayAggregatesOnly(true);
}

void register_backend_benchmark(const std::string& name, const impl::Backend& backend, const std::string& unsupported,
                                std::function<void(benchmark::State&)> run) {
  if (unsupported.empty()) return register_benchmark(name, std::move(run));
  const std::string why = "not supported: the " + backend.name + " backend's capabilities exclude " + unsupported;
  register_benchmark(name, [why](benchmark::State& state) { state.SkipWithError(why.c_str()); });
}

}  // namespace gemma4::bench
