#include "conformance/flatness.h"

#include <set>
#include <sstream>

#include "reference/error.h"

namespace gemma4::conformance {

void FlatnessRule::require_steps(int steps) {
  const int needed = warmup(steps) + kMinMeasured + witnesses(steps);
  if (steps < needed) {
    throw Error("memory_flatness needs at least " + std::to_string(needed) + " steps (--steps " +
                std::to_string(steps) + ")");
  }
}

int64_t layer_kv_bytes(const Config& config, int layer, int64_t batch, int64_t seq, torch::ScalarType dtype) {
  if (layer < 0 || layer >= static_cast<int>(config.layers.size())) {
    throw Error("layer_kv_bytes: no layer " + std::to_string(layer) + " in a config of " +
                std::to_string(config.layers.size()) + " layers");
  }
  const LayerSpec& spec = config.layers[layer];
  return 2 * batch * spec.num_kv_heads * seq * spec.head_dim * static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t shared_kv_bytes(const Config& config, int64_t batch, int64_t seq, torch::ScalarType dtype) {
  std::set<int> sources;
  for (const LayerSpec& spec : config.layers) {
    if (spec.kv_shared) sources.insert(spec.kv_source);
  }
  int64_t total = 0;
  for (int layer : sources) total += layer_kv_bytes(config, layer, batch, seq, dtype);
  return total;
}

namespace {

// Least-squares slope of y against x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += x[i], my += y[i];
  mx /= x.size(), my /= y.size();
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  return sxx > 0 ? sxy / sxx : 0;
}

}  // namespace

Result judge_flatness(const std::vector<int64_t>& live_bytes_per_step, double kv_bytes, const std::string& kv_about) {
  const int steps = static_cast<int>(live_bytes_per_step.size());
  FlatnessRule::require_steps(steps);
  if (!(kv_bytes > 0)) {
    throw Error("memory_flatness: " + kv_about + " is " + std::to_string(kv_bytes) + " B: nothing bounds the slope");
  }
  const int first = FlatnessRule::warmup(steps), last = steps - 1 - FlatnessRule::witnesses(steps);
  // floor[step] = min(live[step..N-1]), filled from the end.
  std::vector<double> floor(steps);
  floor[steps - 1] = static_cast<double>(live_bytes_per_step[steps - 1]);
  for (int step = steps - 2; step >= 0; --step) {
    floor[step] = std::min(floor[step + 1], static_cast<double>(live_bytes_per_step[step]));
  }
  std::vector<double> x, y;
  for (int step = first; step <= last; ++step) x.push_back(step), y.push_back(floor[step]);
  const auto [low, high] = std::minmax_element(live_bytes_per_step.begin() + first,
                                               live_bytes_per_step.begin() + last + 1);
  Result row;
  row.case_name = "live bytes after each step";
  row.metric = "slope_bytes_per_step";
  row.value = slope(x, y);
  row.bound = FlatnessRule::kBoundFraction * kv_bytes;
  row.status = row.value < row.bound ? Status::kPass : Status::kFail;
  std::ostringstream detail;
  detail << steps << " steps, slope of the floor over steps " << first << ".." << last << " (witnesses to "
         << steps - 1 << "); floor " << static_cast<int64_t>(floor[first]) << " -> "
         << static_cast<int64_t>(floor[last]) << " B, live bytes read there range " << *high - *low << " B; "
         << kv_about << " " << static_cast<int64_t>(kv_bytes) << " B";
  row.detail = detail.str();
  return row;
}

}  // namespace gemma4::conformance
