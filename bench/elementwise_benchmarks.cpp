// The memory-bound ops, at batch 1 and a geometry's shapes, for every measured backend (skipped as
// not supported where its capabilities exclude the device, dtype or head dim):
//   qk_norm_rope_sliding, qk_norm_rope_global: LayerOps::qk_norm_rope on the raw projections of the
//     first sliding / global layer (q [1, S, Hq, D], k and v [1, S, Hkv, D]; no v on K=V layers)
//     with that layer type's RoPE table;
//   geglu: LayerOps::geglu on gate and up [1, S, I];
//   rms_norm: LayerOps::rms_norm on the residual stream [1, S, H] with a weight [H].
// They are compared with the ceiling/d2d_copy bandwidth measured in the same run (ceilings.cpp).
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "bench/case_cache.h"
#include "bench/memory_estimate.h"
#include "bench/registration.h"
#include "bench/run.h"
#include "reference/ops.h"

namespace gemma4::bench {
namespace {

using torch::Tensor;
using Shapes = std::vector<std::vector<int64_t>>;
using Tensors = std::vector<Tensor>;

struct MemoryBoundOp {
  std::string name;
  int64_t head_dim = 0;  // asked of the capabilities; 0: not asked
  Shapes inputs;         // differentiable, in the op's argument order; a 1-D input is a norm weight
  Shapes tables;         // not differentiable
  Shapes outputs;
  std::function<Tensors(const Geometry&, int64_t S)> make_tables;
  std::function<Tensors(const LayerOps&, const Tensors& inputs, const Tensors& tables)> call;
};

MemoryBoundOp qk_norm_rope_op(const Config& c, LayerType type, int64_t S) {
  const LayerSpec& layer = layer_of_type(c, type);
  const int64_t Hq = c.num_attention_heads, Hkv = layer.num_kv_heads, D = layer.head_dim;
  const bool k_eq_v = layer.k_eq_v;
  const double eps = c.rms_norm_eps;
  const RopeParameters rope = c.rope.at(type);
  MemoryBoundOp op;
  op.name = type == LayerType::kSliding ? "qk_norm_rope_sliding" : "qk_norm_rope_global";
  op.head_dim = D;
  op.inputs = {{1, S, Hq, D}, {1, S, Hkv, D}};
  if (!k_eq_v) op.inputs.push_back({1, S, Hkv, D});
  op.inputs.insert(op.inputs.end(), {{D}, {D}});  // q_norm, k_norm
  op.tables = {{S, D}, {S, D}};
  op.outputs = {{1, S, Hq, D}, {1, Hkv, S, D}, {1, Hkv, S, D}};
  op.make_tables = [rope, D](const Geometry& g, int64_t seq_len) {
    const RopeTable table = rope_table(rope, D, seq_len, g.dtype, g.device);
    return Tensors{table.cos, table.sin};
  };
  op.call = [k_eq_v, eps](const LayerOps& ops, const Tensors& in, const Tensors& tables) {
    // in: q, k, [v,] q_norm, k_norm
    const Tensor v = k_eq_v ? Tensor() : in[2];
    const QkvOutputs out =
        ops.qk_norm_rope(in[0], in[1], v, in[in.size() - 2], in.back(), RopeTable{tables[0], tables[1]}, eps);
    return Tensors{out.q, out.k, out.v};
  };
  return op;
}

// An op without tables or head dim; `call` maps the inputs to its one output.
MemoryBoundOp plain_op(std::string name, Shapes inputs, Shapes outputs,
                       std::function<Tensor(const LayerOps&, const Tensors&)> call) {
  MemoryBoundOp op;
  op.name = std::move(name);
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.make_tables = [](const Geometry&, int64_t) { return Tensors{}; };
  op.call = [call](const LayerOps& ops, const Tensors& in, const Tensors&) { return Tensors{call(ops, in)}; };
  return op;
}

std::vector<MemoryBoundOp> memory_bound_ops(const Config& c, int64_t S) {
  const int64_t H = c.hidden_size, I = c.layers[0].mlp_intermediate;
  const double eps = c.rms_norm_eps;
  return {qk_norm_rope_op(c, LayerType::kSliding, S), qk_norm_rope_op(c, LayerType::kFull, S),
          plain_op("geglu", {{1, S, I}, {1, S, I}}, {{1, S, I}},
                   [](const LayerOps& ops, const Tensors& in) { return ops.geglu(in[0], in[1]); }),
          plain_op("rms_norm", {{1, S, H}, {H}}, {{1, S, H}},
                   [eps](const LayerOps& ops, const Tensors& in) { return ops.rms_norm(in[0], in[1], eps); })};
}

double elements(const Shapes& shapes) {
  double n = 0;
  for (const auto& shape : shapes) {
    double e = 1;
    for (int64_t d : shape) e *= static_cast<double>(d);
    n += e;
  }
  return n;
}

struct Case {
  Tensors inputs, tables, upstream;
};

Case make_case(const MemoryBoundOp& op, const Geometry& g, int64_t S, bool backward) {
  const auto opts = torch::TensorOptions().dtype(g.dtype).device(g.device);
  Case c;
  for (const auto& shape : op.inputs) {
    // Norm weights near 1 (as the seeded weights), activations standard normal.
    const Tensor t = shape.size() == 1 ? at::empty(shape, opts).uniform_(0.5, 1.5) : at::randn(shape, opts);
    c.inputs.push_back(t.requires_grad_(backward));
  }
  c.tables = op.make_tables(g, S);
  if (backward) {
    for (const auto& shape : op.outputs) c.upstream.push_back(at::randn(shape, opts));
  }
  return c;
}

void register_case(const impl::Backend& b, const Geometry& g, const MemoryBoundOp& op, int64_t S, bool backward) {
  const std::string unsupported = b.capabilities.unsupported(g.device, g.dtype, op.head_dim);
  const std::string name = benchmark_name(op.name, b.name, g, S, backward);
  const double e = static_cast<double>(g.element_bytes());
  const Work work =
      memory_bound_work(elements(op.inputs) * e, elements(op.tables) * e, elements(op.outputs) * e, backward);
  const double bytes = memory_bound_bytes(elements(op.inputs) + elements(op.tables) + elements(op.outputs), backward);
  register_backend_benchmark(
      name, b, unsupported, [&b, &g, op, S, backward, name, work, bytes](benchmark::State& state) {
        run_benchmark(state, g.device, work, kWarmup, [&] {
          const Case& c = cached_case<Case>(name, g.device, bytes, [&] { return make_case(op, g, S, backward); });
          return op_step(
              backward, [&b, &c, &op] { return op.call(b.ops, c.inputs, c.tables); }, c.inputs, c.upstream);
        });
      });
}

}  // namespace

void register_elementwise_benchmarks(const Suite& suite) {
  for (const Geometry& g : suite.geometries) {
    const size_t num_ops = memory_bound_ops(g.config, 1).size();
    for (size_t i = 0; i < num_ops; ++i) {  // grouped by op, then S
      for (int64_t S : g.seq_lens) {
        const MemoryBoundOp op = memory_bound_ops(g.config, S)[i];
        if (!g.measures(op.name)) break;
        for (bool backward : {false, true}) {
          for (const impl::Backend& b : suite.backends) register_case(b, g, op, S, backward);
        }
      }
    }
  }
}

}  // namespace gemma4::bench
