// memory_flatness: training with activation checkpointing and shared KV must not grow memory from
// step to step. GEMMA4.md, "Known failure modes": a mutable container of K/V tensors captured by a
// checkpoint closure kept every step's K/V alive (+0.47 GiB/step, OOM at step 73 on Gemma-4 31B);
// the invariant is that what crosses a checkpoint boundary is a tensor or plain data.
// Each check trains N steps (default 50 on CPU, 200 on CUDA; SuiteOptions::steps overrides when
// > 0) of forward + backward with every layer checkpointed and the backend's ops and hand-off,
// drops the gradients (zero_grad(set_to_none)) and reads the live allocator bytes after each step,
// once the step's graph is gone:
//  - CPU: a tracking allocator installed through c10::SetCPUAllocator (tracking_allocator.h);
//  - CUDA: the caching allocator's allocated_bytes (aggregate, current) for the device.
// The least-squares slope of live bytes against the step index, after a warm-up of max(3, N/10)
// steps (the first steps allocate lazily created state), must be under 1% of one step's shared
// K/V (the K and V every storing layer hands to the KV-shared layers, summed). A leak of the kind
// above retains at least one step's shared K/V per step, a slope of >= 100% of that; an honest
// implementation allocates the same bytes every step, a slope of 0. The slope is reported in
// bytes per step.
// Checks: steps-N/e2b (the tiny E2B, B = 2, S = 128), and on CUDA only steps-N/e2b-real-4-layers
// (E2B's real geometry, head dims 256/512, cut to 4 layers of which 2 are KV-shared, vocab 4096,
// B = 1, S = 1024).
#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/types.h>

#ifdef GEMMA4_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <limits>
#include <sstream>

#include "conformance/check.h"
#include "conformance/tiny_models.h"
#include "conformance/tracking_allocator.h"
#include "golden/model_cases.h"
#include "reference/error.h"

namespace gemma4::conformance {
namespace {

using golden::TensorMap;
using torch::Tensor;

int default_steps(const SuiteOptions& o) { return o.steps > 0 ? o.steps : (o.device.is_cuda() ? 200 : 50); }

// "" when live bytes can be read on the device, else why not.
std::string cannot_measure(const torch::Device& device) {
  if (!device.is_cuda()) return "";
#ifdef GEMMA4_WITH_CUDA
  return "";
#else
  return "built without GEMMA4_WITH_CUDA: no caching-allocator statistics";
#endif
}

int64_t live_bytes(const torch::Device& device) {
  if (!device.is_cuda()) return tracked_cpu_live_bytes();
#ifdef GEMMA4_WITH_CUDA
  const c10::DeviceIndex index = device.index() < 0 ? c10::cuda::current_device() : device.index();
  torch::cuda::synchronize(index);
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[0].current;
#else
  throw Error("no caching-allocator statistics in this build");
#endif
}

// Least-squares slope of y against x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += x[i], my += y[i];
  mx /= x.size(), my /= y.size();
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  return sxx > 0 ? sxy / sxx : 0;
}

void train_and_measure(const SuiteOptions& o, Reporter& r, const Config& c, ModelWeights weights, const TensorMap& inputs) {
  const std::string why = unsupported(o, c);
  if (!why.empty()) return r.not_supported(why);
  const std::string no_stats = cannot_measure(o.device);
  if (!no_stats.empty()) return r.not_supported(no_stats);
  const int steps = default_steps(o);
  const int warmup = std::max(3, steps / 10);
  if (steps < warmup + 3) {
    throw Error("memory_flatness needs at least " + std::to_string(warmup + 3) + " steps (--steps " +
                std::to_string(steps) + ")");
  }
  if (!o.device.is_cuda()) install_tracking_cpu_allocator();

  weights = fresh_leaves(c, weights);
  std::vector<Tensor> trainable;
  for (WeightSlot& slot : weight_slots(c, weights)) {
    if (slot.trainable && slot.tensor->defined()) trainable.push_back(*slot.tensor);
  }
  const Model model(c, weights);
  const ForwardInputs in = golden::forward_inputs(inputs, o.device);
  const ForwardOptions f = backend_forward(o, c, /*checkpoint=*/true);

  // One step's shared K/V, from a forward without grad that keeps the stored K/V.
  int64_t kv_bytes = 0;
  int storing = 0;
  {
    torch::NoGradGuard no_grad;
    ForwardOptions probe = f;
    probe.keep_layer_outputs = true;
    probe.keep_hidden_states = false;
    const ForwardOutputs out = model.forward(in, probe);
    for (const auto& [layer, kv] : out.stored_kv) kv_bytes += kv.first.nbytes() + kv.second.nbytes(), ++storing;
  }
  if (kv_bytes == 0) throw Error("the model stores no shared K/V: nothing for memory_flatness to measure");
  const double bound = 0.01 * static_cast<double>(kv_bytes);

  std::vector<double> x, y;
  int64_t first = 0, last = 0, low = std::numeric_limits<int64_t>::max(), high = 0;
  for (int step = 0; step < steps; ++step) {
    {
      torch::AutoGradMode grad_mode(true);
      const ForwardOutputs out = model.forward(in, f);
      out.loss.backward();
    }
    for (Tensor& t : trainable) t.mutable_grad().reset();  // zero_grad(set_to_none=True)
    const int64_t bytes = live_bytes(o.device);
    if (step < warmup) continue;
    x.push_back(step);
    y.push_back(static_cast<double>(bytes));
    if (step == warmup) first = bytes;
    last = bytes;
    low = std::min(low, bytes), high = std::max(high, bytes);
  }
  const double s = slope(x, y);
  std::ostringstream detail;
  detail << steps << " steps, slope over steps " << warmup << ".." << steps - 1 << "; live bytes " << first << " -> "
         << last << " (range " << high - low << "); one step's shared K/V " << kv_bytes << " B (" << storing
         << " storing layers)";
  r.record("live bytes after each step", "slope_bytes_per_step", s, bound, s < bound, detail.str());
}

void check_tiny(const SuiteOptions& o, Reporter& r) {
  const TinyModel m = tiny_model("e2b", o);
  // A sequence long enough that one step's shared K/V is many allocator granules.
  train_and_measure(o, r, m.config, m.weights, golden::make_model_inputs(m.config, 2, 128, 11));
}

// E2B at its real geometry (hidden 1536, head dims 256 sliding / 512 full, PLE, double-wide MLP on
// the shared layers) cut to 4 layers: 0 sliding and 1 full store K/V, 2 and 3 borrow them.
void check_real(const SuiteOptions& o, Reporter& r) {
  nlohmann::json j = golden::load_released_config("gemma-4-e2b.json", golden::released_configs_dir());
  j["num_hidden_layers"] = 4;
  j["num_kv_shared_layers"] = 2;
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  j["vocab_size"] = 4096;
  j["vocab_size_per_layer_input"] = 4096;
  j.erase("per_layer_config");
  const Config c = parse_config(j);
  train_and_measure(o, r, c, random_weights(c, 11, o.dtype, o.device), golden::make_model_inputs(c, 1, 1024, 11));
}

}  // namespace

std::vector<Check> memory_flatness_checks(const SuiteOptions& o) {
  const std::string steps = "steps-" + std::to_string(default_steps(o)) + "/";
  std::vector<Check> checks{{Category::kMemoryFlatness, steps + "e2b", check_tiny}};
  if (o.device.is_cuda()) checks.push_back({Category::kMemoryFlatness, steps + "e2b-real-4-layers", check_real});
  return checks;
}

}  // namespace gemma4::conformance
