// memory_flatness: training with activation checkpointing and shared KV must not grow memory from
// step to step. The rule (steps, warm-up, slope, bound) and why are conformance/flatness.h, shared
// with conform-model and its --distributed mode; this file measures for the suite.
// Each check trains N steps (default 50 on CPU, 200 on CUDA; SuiteOptions::steps overrides when
// > 0) of forward + backward with every layer checkpointed and the backend's ops and hand-off,
// drops the gradients (zero_grad(set_to_none)) and reads the live allocator bytes after each step,
// once the step's graph is gone:
//  - CPU: a tracking allocator installed through c10::SetCPUAllocator (impl/memory/tracking_allocator.h);
//  - CUDA: the caching allocator's allocated_bytes (aggregate, current) for the device.
// One step's shared K/V is counted from the config (shared_kv_bytes) in the suite's dtype.
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

#include "conformance/check.h"
#include "conformance/flatness.h"
#include "conformance/tiny_models.h"
#include "golden/golden_file.h"
#include "golden/model_cases.h"
#include "impl/memory/tracking_allocator.h"
#include "reference/error.h"

namespace gemma4::conformance {
namespace {

using golden::TensorMap;
using torch::Tensor;

int default_steps(const SuiteOptions& o) {
  return o.steps > 0 ? o.steps : FlatnessRule::default_steps(o.device.is_cuda());
}

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
  if (!device.is_cuda()) return memory::tracked_cpu_live_bytes();
#ifdef GEMMA4_WITH_CUDA
  const c10::DeviceIndex index = device.index() < 0 ? c10::cuda::current_device() : device.index();
  torch::cuda::synchronize(index);
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[0].current;
#else
  throw Error("no caching-allocator statistics in this build");
#endif
}

void train_and_measure(const SuiteOptions& o, Reporter& r, const Config& c, ModelWeights weights, const TensorMap& inputs) {
  const std::string why = unsupported(o, c);
  if (!why.empty()) return r.not_supported(why);
  const std::string no_stats = cannot_measure(o.device);
  if (!no_stats.empty()) return r.not_supported(no_stats);
  const int steps = default_steps(o);
  FlatnessRule::require_steps(steps);
  if (!o.device.is_cuda()) memory::install_tracking_cpu_allocator();

  weights = fresh_leaves(c, weights);
  std::vector<Tensor> trainable;
  for (WeightSlot& slot : weight_slots(c, weights)) {
    if (slot.trainable && slot.tensor->defined()) trainable.push_back(*slot.tensor);
  }
  const Model model(c, weights);
  const ForwardInputs in = golden::forward_inputs(inputs, o.device);
  const ForwardOptions f = backend_forward(o, c, /*checkpoint=*/true);
  const int64_t batch = inputs.at("input_ids").size(0), seq = inputs.at("input_ids").size(1);
  const int64_t kv_bytes = shared_kv_bytes(c, batch, seq, o.dtype);
  if (kv_bytes == 0) throw Error("the model stores no shared K/V: nothing for memory_flatness to measure");

  std::vector<int64_t> live;
  for (int step = 0; step < steps; ++step) {
    {
      torch::AutoGradMode grad_mode(true);
      const ForwardOutputs out = model.forward(in, f);
      out.loss.backward();
    }
    for (Tensor& t : trainable) t.mutable_grad().reset();  // zero_grad(set_to_none=True)
    live.push_back(live_bytes(o.device));
  }
  Result row = judge_flatness(live, static_cast<double>(kv_bytes));
  row.detail += " (B=" + std::to_string(batch) + ", S=" + std::to_string(seq) + ", " + golden::dtype_name(o.dtype) + ")";
  r.record(std::move(row));
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
