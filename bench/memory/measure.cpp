#include "bench/memory/measure.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "bench/memory/measure_model.h"
#include "bench/memory/step_tensors.h"
#include "impl/memory/probe.h"
#include "reference/checkpoint.h"
#include "reference/decoder_layer.h"
#include "reference/error.h"
#include "reference/model.h"
#include "reference/ops.h"
#include "reference/weights.h"

#ifdef GEMMA4_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace gemma4::memory {
namespace {

using torch::Tensor;

// The layer's weights, one per slot; in training, trainable ones need gradient and have a buffer.
LayerWeights layer_weights(const Config& c, int layer, bool train, const torch::TensorOptions& options) {
  LayerWeights w;
  fill_slots(layer_weight_slots(c, layer, w), train, options);
  return w;
}

// The layer whose cache (or stored K/V) a KV-shared layer reads.
int kv_source(const Config& c, int layer) {
  const LayerSpec& spec = c.layers[layer];
  return spec.kv_shared ? spec.kv_source : layer;
}

struct LayerStep {
  const Config& c;
  int layer;
  LayerWeights weights;
  const impl::Backend& backend;
  Probe probe;
};

// Training: forward (plain or under a checkpoint), then backward of the output hidden (and of
// stored K/V) against upstream gradients.
PartFigures train_layer(LayerStep& s, Phase phase, const StepShape& shape, const torch::TensorOptions& o) {
  const Config& c = s.c;
  const LayerSpec& spec = c.layers[s.layer];
  const int64_t B = shape.batch, S = shape.tokens, H = c.hidden_size, P = c.hidden_size_per_layer_input;
  LayerInputs in;
  in.hidden = torch::randn({B, S, H}, o);
  with_grad_buffer(in.hidden);
  if (P > 0) {
    in.per_layer_input = torch::randn({B, S, P}, o);
    with_grad_buffer(in.per_layer_input);
  }
  if (spec.kv_shared) {
    for (Tensor* t : {&in.shared_k, &in.shared_v}) {
      *t = torch::randn({B, spec.num_kv_heads, S, spec.head_dim}, o);
      with_grad_buffer(*t);
    }
  }
  const RopeTable rope = rope_table(c.rope.at(spec.type), spec.head_dim, S, o.dtype().toScalarType(), o.device());
  in.rope_cos = rope.cos;
  in.rope_sin = rope.sin;
  const Tensor up_hidden = torch::randn({B, S, H}, o);
  const Tensor up_k = spec.stores_kv ? torch::randn({B, spec.num_kv_heads, S, spec.head_dim}, o) : Tensor();
  const Tensor up_v = spec.stores_kv ? torch::randn({B, spec.num_kv_heads, S, spec.head_dim}, o) : Tensor();

  const int64_t base = s.probe.live();
  s.probe.reset_peak();
  std::vector<Tensor> outputs;  // hidden, then k and v when the layer stores them
  {
    LayerOutputs out;
    if (phase == Phase::kTrainCheckpointed) {
      const Config* config = &c;
      const int l = s.layer;
      const LayerWeights w = s.weights;
      const LayerOps ops = s.backend.ops;
      auto fn = [config, l, w, ops](const std::vector<Tensor>& t) {
        LayerInputs layer_in;
        layer_in.hidden = t[0];
        layer_in.per_layer_input = t[1];
        layer_in.shared_k = t[2];
        layer_in.shared_v = t[3];
        layer_in.rope_cos = t[4];
        layer_in.rope_sin = t[5];
        const LayerOutputs o = decoder_layer(*config, l, w, layer_in, ops);
        return std::vector<Tensor>{o.hidden, o.k, o.v};
      };
      const std::vector<Tensor> o =
          checkpoint(fn, {in.hidden, in.per_layer_input, in.shared_k, in.shared_v, in.rope_cos, in.rope_sin},
                     trainable_tensors(c, s.layer, s.weights));
      out.hidden = o[0];
      out.k = o[1];
      out.v = o[2];
    } else {
      out = decoder_layer(c, s.layer, s.weights, in, s.backend.ops);
    }
    outputs.push_back(out.hidden);
    if (spec.stores_kv) {
      outputs.push_back(out.k);
      outputs.push_back(out.v);
    }
  }  // the attention output, router logits and unstored K/V go, as in Model::forward
  PartFigures f;
  f.retained = static_cast<double>(s.probe.live() - base);
  std::vector<Tensor> upstream{up_hidden};
  if (spec.stores_kv) upstream.insert(upstream.end(), {up_k, up_v});
  torch::autograd::backward(outputs, upstream);
  outputs.clear();
  f.peak = static_cast<double>(s.probe.peak() - base);
  return f;
}

// Prefill: one forward without autograd over the prompt.
PartFigures prefill_layer(LayerStep& s, const StepShape& shape, const torch::TensorOptions& o) {
  const Config& c = s.c;
  const LayerSpec& spec = c.layers[s.layer];
  const int64_t B = shape.batch, S = shape.tokens;
  torch::NoGradGuard no_grad;
  LayerInputs in;
  in.hidden = torch::randn({B, S, c.hidden_size}, o);
  if (c.hidden_size_per_layer_input > 0) in.per_layer_input = torch::randn({B, S, c.hidden_size_per_layer_input}, o);
  if (spec.kv_shared) {
    in.shared_k = torch::randn({B, spec.num_kv_heads, S, spec.head_dim}, o);
    in.shared_v = torch::randn({B, spec.num_kv_heads, S, spec.head_dim}, o);
  }
  const RopeTable rope = rope_table(c.rope.at(spec.type), spec.head_dim, S, o.dtype().toScalarType(), o.device());
  in.rope_cos = rope.cos;
  in.rope_sin = rope.sin;
  const int64_t base = s.probe.live();
  s.probe.reset_peak();
  PartFigures f;
  {
    const LayerOutputs out = decoder_layer(c, s.layer, s.weights, in, s.backend.ops);
    f.retained = static_cast<double>(s.probe.live() - base);
  }
  f.peak = static_cast<double>(s.probe.peak() - base);
  return f;
}

// Decode: one new token per sequence against a cache that holds `context` entries, filled as a
// run fills it (the prompt, then one step), so that a sliding cache is in its steady state. The
// cache belongs to the baseline; what the step adds to it (one entry) is not activation.
PartFigures decode_layer(LayerStep& s, const StepShape& shape, const torch::TensorOptions& o) {
  const Config& c = s.c;
  const LayerSpec& spec = c.layers[s.layer];
  const LayerSpec& owner = c.layers[kv_source(c, s.layer)];
  const int64_t B = shape.batch, T = shape.context;
  if (T < 2) throw Error("decode needs a context of at least 2 entries");
  torch::NoGradGuard no_grad;
  const KvCacheOps& cache_ops = s.backend.kv_cache.make ? s.backend.kv_cache : reference_kv_cache_ops();
  const CacheSpec cache_spec{kv_source(c, s.layer),
                             owner.type,
                             B,
                             owner.num_kv_heads,
                             owner.head_dim,
                             owner.type == LayerType::kSliding ? c.sliding_window : 0,
                             T + 1,
                             o.dtype().toScalarType(),
                             o.device()};
  std::unique_ptr<LayerKvCache> cache = cache_ops.make(cache_spec);
  // A KV-shared layer reads its source's cache after the source wrote this step's entry.
  std::vector<std::pair<int64_t, int64_t>> updates{{0, T - 1}, {T - 1, 1}};
  if (spec.kv_shared) updates.emplace_back(T, 1);
  for (const auto& [start, count] : updates) {
    const Tensor k = torch::randn({B, owner.num_kv_heads, count, owner.head_dim}, o);
    cache_ops.update(*cache, k, torch::randn_like(k), start);
  }
  const RopeTable rope = rope_table(c.rope.at(spec.type), spec.head_dim, T + 1, o.dtype().toScalarType(), o.device());
  LayerInputs in;
  in.hidden = torch::randn({B, 1, c.hidden_size}, o);
  if (c.hidden_size_per_layer_input > 0) in.per_layer_input = torch::randn({B, 1, c.hidden_size_per_layer_input}, o);
  in.rope_cos = rope.cos;
  in.rope_sin = rope.sin;
  in.padding = torch::ones({B, T + 1}, o.dtype(torch::kInt64));
  in.rope_positions = torch::full({B, 1}, T, o.dtype(torch::kInt64));
  in.cache = cache.get();
  in.cache_ops = &cache_ops;
  in.cache_start = T;
  const int64_t base = s.probe.live();
  s.probe.reset_peak();
  PartFigures f;
  {
    const LayerOutputs out = decoder_layer(c, s.layer, s.weights, in, s.backend.ops);
    f.retained = static_cast<double>(s.probe.live() - base);
  }
  const double cache_growth = static_cast<double>(std::max<int64_t>(0, s.probe.live() - base));
  f.peak = static_cast<double>(s.probe.peak() - base) - cache_growth;
  f.retained -= cache_growth;
  return f;
}

PartFigures measure_layer(const Config& c, int layer, Phase phase, const StepShape& shape, const impl::Backend& backend,
                          const torch::TensorOptions& o) {
  LayerStep s{c, layer, layer_weights(c, layer, is_training(phase), o), backend, Probe(o.device())};
  switch (phase) {
    case Phase::kTrain:
    case Phase::kTrainCheckpointed:
      return train_layer(s, phase, shape, o);
    case Phase::kPrefill:
      return prefill_layer(s, shape, o);
    case Phase::kDecode:
      return decode_layer(s, shape, o);
  }
  throw Error("unknown phase");
}

}  // namespace

PartFigures measure_part(const Config& c, Part part, Phase phase, const StepShape& shape, const impl::Backend& backend,
                         const torch::Device& device, torch::ScalarType dtype) {
  if (shape.tokens <= 0 || shape.batch <= 0) throw Error("tokens and batch must be positive");
  const torch::TensorOptions o = torch::TensorOptions().device(device).dtype(dtype);
  if (part == Part::kEdges) return measure_edges(c, phase, shape, backend.ops, o);
  if (part == Part::kStack) throw Error("the stack is combined from its parts, not measured alone");
  if (part == Part::kWhole) return measure_whole(c, phase, shape, backend, o);
  const std::optional<int> layer = layer_of_part(c, part);
  if (!layer) throw Error("the config has no " + part_name(part) + " layer");
  return measure_layer(c, *layer, phase, shape, backend, o);
}

std::optional<double> free_device_bytes(const torch::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
#ifdef GEMMA4_WITH_CUDA
  initialise_allocator(device);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return std::nullopt;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return static_cast<double>(free) +
         static_cast<double>(stats.reserved_bytes[0].current - stats.allocated_bytes[0].current);
#else
  return std::nullopt;
#endif
}

std::string device_name(const torch::Device& device) {
  if (!device.is_cuda()) return "cpu";
#ifdef GEMMA4_WITH_CUDA
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, c10::cuda::current_device()) == cudaSuccess) return props.name;
#endif
  return "cuda";
}

void release_cached_memory(const torch::Device& device) {
#ifdef GEMMA4_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

}  // namespace gemma4::memory
