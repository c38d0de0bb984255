#include "tools/python/python_backend.h"

#include <memory>

#include "golden/golden_file.h"
#include "reference/error.h"

namespace py = pybind11;

namespace gemma4::python {
namespace {

// A Python callable that C++ may copy on any thread. The suite copies backends freely (into static
// storage for the run, into the threads of multithreaded_recompute, into autograd's device thread),
// none of which holds the GIL, so the callable is referenced once here and never released: it
// lives as long as the process, which a backend under test does anyway.
class Callable {
 public:
  Callable(std::string backend, std::string op, const py::handle& fn)
      : backend_(std::move(backend)), op_(std::move(op)), fn_(fn.inc_ref().ptr()) {}

  // The caller holds the GIL (it needs it to convert the arguments). A Python exception becomes a
  // gemma4::Error naming the backend and op, which the suite reports as that check's failure.
  template <typename... Args>
  py::object operator()(Args&&... args) const {
    try {
      return py::reinterpret_borrow<py::object>(fn_)(std::forward<Args>(args)...);
    } catch (py::error_already_set& e) {
      throw Error(where() + " raised " + e.what());
    }
  }

  // A returned tensor, checked: a Python op that returns something else fails with its name.
  torch::Tensor tensor(const py::handle& value, const char* what) const {
    if (!THPVariable_Check(value.ptr())) {
      throw Error(where() + " returned " + std::string(py::str(py::type::of(value).attr("__name__"))) + " for " +
                  what + ", not a torch.Tensor");
    }
    return THPVariable_Unpack(value.ptr());
  }
  torch::Tensor optional_tensor(const py::handle& value, const char* what) const {
    return value.is_none() ? torch::Tensor() : tensor(value, what);
  }

 private:
  std::string where() const { return "python op " + op_ + " of backend '" + backend_ + "'"; }
  std::string backend_, op_;
  PyObject* fn_;  // one reference, never released (see above)
};

py::object to_python(const torch::Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

void replace_ops(LayerOps& ops, const std::string& backend, const py::dict& given) {
  for (const auto& [key, value] : given) {
    const std::string op = py::str(key);
    if (value.is_none() || op.rfind("cache_", 0) == 0) continue;  // the cache ops: cache_ops()
    if (!PyCallable_Check(value.ptr())) throw Error("backend '" + backend + "': op " + op + " is not callable");
    const auto fn = std::make_shared<Callable>(backend, op, value);
    if (op == "rms_norm") {
      ops.rms_norm = [fn](const torch::Tensor& x, const torch::Tensor& weight, double eps) {
        py::gil_scoped_acquire gil;
        return fn->tensor((*fn)(x, to_python(weight), eps), "the norm");
      };
    } else if (op == "qk_norm_rope") {
      ops.qk_norm_rope = [fn](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& q_norm, const torch::Tensor& k_norm, const RopeTable& rope, double eps) {
        py::gil_scoped_acquire gil;
        const py::object out = (*fn)(q, to_python(k), to_python(v), q_norm, to_python(k_norm), rope, eps);
        if (!py::isinstance<py::sequence>(out) || py::len(out) != 3) {
          throw Error("python op qk_norm_rope must return (q, k, v); k and v None on a KV-shared layer");
        }
        const py::sequence qkv = out;
        return QkvOutputs{fn->tensor(qkv[0], "q"), fn->optional_tensor(qkv[1], "k"), fn->optional_tensor(qkv[2], "v")};
      };
    } else if (op == "attention") {
      ops.attention = [fn](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const AttentionSpec& spec) {
        py::gil_scoped_acquire gil;
        return fn->tensor((*fn)(q, k, v, spec), "the attention output");
      };
    } else if (op == "geglu") {
      ops.geglu = [fn](const torch::Tensor& gate, const torch::Tensor& up) {
        py::gil_scoped_acquire gil;
        return fn->tensor((*fn)(gate, up), "the GeGLU output");
      };
    } else if (op == "moe_experts") {
      ops.moe_experts = [fn](const torch::Tensor& x, const torch::Tensor& top_index, const torch::Tensor& top_weights,
                             const torch::Tensor& gate_up_proj, const torch::Tensor& down_proj) {
        py::gil_scoped_acquire gil;
        return fn->tensor((*fn)(x, top_index, top_weights, gate_up_proj, down_proj), "the experts' output");
      };
    } else {
      throw Error("backend '" + backend + "': unknown op '" + op +
                  "' (rms_norm, qk_norm_rope, attention, geglu, moe_experts, cache_make, cache_update, "
                  "cache_attention, cache_contents, cache_rollback)");
    }
  }
}

// A cache made by a Python backend's cache_make: the Python object, released with the GIL held
// (the suite destroys caches on threads that do not hold it).
struct PythonCache : LayerKvCache {
  explicit PythonCache(py::object o) : object(std::move(o)) {}
  ~PythonCache() override {
    py::gil_scoped_acquire gil;
    object = py::object();
  }
  py::object object;
};

const py::object& python_cache(const LayerKvCache& cache) { return dynamic_cast<const PythonCache&>(cache).object; }

// The four cache callables, all or none: cache_make(spec) -> any object; cache_update(cache, k, v,
// start); cache_attention(q, cache, spec) -> [B, c, Hq*D]; cache_contents(cache) -> (k, v, first);
// and optionally cache_rollback(cache, n) (speculative decoding), which needs the four.
KvCacheOps cache_ops(const std::string& backend, const py::dict& given) {
  const char* names[] = {"cache_make", "cache_update", "cache_attention", "cache_contents"};
  std::vector<std::shared_ptr<Callable>> fns;
  std::string missing;
  for (const char* name : names) {
    if (!given.contains(name) || given[name].is_none()) {
      missing += std::string(missing.empty() ? "" : ", ") + name;
      continue;
    }
    const py::object fn = given[name];
    if (!PyCallable_Check(fn.ptr())) throw Error("backend '" + backend + "': op " + name + " is not callable");
    fns.push_back(std::make_shared<Callable>(backend, name, fn));
  }
  const bool rollback = given.contains("cache_rollback") && !given["cache_rollback"].is_none();
  if (fns.empty() && rollback) throw Error("backend '" + backend + "': cache_rollback needs the four other cache ops");
  if (fns.empty() && given.contains("cache_quantization")) {
    throw Error("backend '" + backend + "': cache_quantization declares what its own cache ops store; it has none");
  }
  if (fns.empty()) return {};
  if (!missing.empty()) throw Error("backend '" + backend + "': a KV cache needs all four cache ops; missing " + missing);
  KvCacheOps ops;
  if (given.contains("cache_quantization")) {  // what the cache stores: its decode checks' truth
    try {
      ops.quantization = kv_quantization_from_name(py::str(given["cache_quantization"]));
    } catch (const Error& e) {
      throw Error("backend '" + backend + "': cache_quantization: " + e.what());
    }
  }
  ops.make = [fn = fns[0]](const CacheSpec& spec) -> std::unique_ptr<LayerKvCache> {
    py::gil_scoped_acquire gil;
    return std::make_unique<PythonCache>((*fn)(spec));
  };
  ops.update = [fn = fns[1]](LayerKvCache& cache, const torch::Tensor& k, const torch::Tensor& v, int64_t start) {
    py::gil_scoped_acquire gil;
    (*fn)(python_cache(cache), k, v, start);
  };
  ops.attention = [fn = fns[2]](const torch::Tensor& q, const LayerKvCache& cache, const DecodeAttentionSpec& spec) {
    py::gil_scoped_acquire gil;
    return fn->tensor((*fn)(q, python_cache(cache), spec), "the decode attention output");
  };
  ops.contents = [fn = fns[3]](const LayerKvCache& cache) {
    py::gil_scoped_acquire gil;
    const py::object out = (*fn)(python_cache(cache));
    if (!py::isinstance<py::sequence>(out) || py::len(out) != 3) {
      throw Error("python op cache_contents must return (k, v, first): k, v [B, Hkv, T, D], first an int");
    }
    const py::sequence kvf = out;
    return CacheContents{fn->tensor(kvf[0], "the cached keys"), fn->tensor(kvf[1], "the cached values"),
                         kvf[2].cast<int64_t>()};
  };
  if (rollback) {
    const py::object given_fn = given["cache_rollback"];
    if (!PyCallable_Check(given_fn.ptr())) throw Error("backend '" + backend + "': op cache_rollback is not callable");
    ops.rollback = [fn = std::make_shared<Callable>(backend, "cache_rollback", given_fn)](LayerKvCache& cache, int64_t n) {
      py::gil_scoped_acquire gil;
      (*fn)(python_cache(cache), n);
    };
  }
  return ops;
}

impl::Capabilities capabilities_from(const std::string& backend, const py::dict& given) {
  impl::Capabilities caps;
  for (const auto& [key, value] : given) {
    const std::string field = py::str(key);
    const std::string where = "backend '" + backend + "': capabilities." + field;
    try {
      if (field == "devices") {
        caps.devices.clear();
        for (const std::string& d : value.cast<std::vector<std::string>>()) {
          if (d != "cpu" && d != "cuda") throw Error(where + ": '" + d + "' is not cpu or cuda");
          caps.devices.push_back(d == "cpu" ? torch::kCPU : torch::kCUDA);
        }
      } else if (field == "dtypes") {
        caps.dtypes.clear();
        for (const std::string& d : value.cast<std::vector<std::string>>()) caps.dtypes.push_back(golden::dtype_from_name(d));
      } else if (field == "head_dims") {
        caps.head_dims = value.cast<std::vector<int64_t>>();
      } else if (field == "max_sliding_window") {
        caps.max_sliding_window = value.cast<int64_t>();
      } else if (field == "deterministic") {
        caps.deterministic = value.cast<bool>();
      } else {
        throw Error(where + ": unknown field (devices, dtypes, head_dims, max_sliding_window, deterministic)");
      }
    } catch (const py::cast_error&) {
      throw Error(where + ": wrong type");
    } catch (const Error& e) {
      const std::string message = e.what();
      throw Error(message.rfind("backend '", 0) == 0 ? message : where + ": " + message);
    }
  }
  return caps;
}

}  // namespace

impl::Backend make_backend(const std::string& name, const std::string& description, const py::dict& ops,
                           const py::dict& capabilities) {
  if (name.empty()) throw Error("a backend needs a name");
  impl::Backend b;
  b.name = name;
  b.description = description.empty() ? "Python backend" : description;
  b.kind = impl::BackendKind::kPlugin;  // nothing is expected of it: the suite decides
  b.ops = reference_layer_ops();
  replace_ops(b.ops, name, ops);
  b.kv_cache = cache_ops(name, ops);
  b.capabilities = capabilities_from(name, capabilities);
  return b;
}

void bind_op_arguments(py::module_& m) {
  py::class_<CacheSpec>(m, "CacheSpec", "What cache_make is told: one storing layer's cache (reference/kv_cache.h).")
      .def_readonly("layer", &CacheSpec::layer)
      .def_property_readonly("layer_type", [](const CacheSpec& s) { return layer_type_name(s.type); })
      .def_readonly("batch", &CacheSpec::batch)
      .def_readonly("kv_heads", &CacheSpec::kv_heads)
      .def_readonly("head_dim", &CacheSpec::head_dim)
      .def_readonly("window", &CacheSpec::window, "sliding layers: a query sees the last `window` indices; 0: all")
      .def_readonly("capacity", &CacheSpec::capacity, "the most token indices the run reaches")
      .def_readonly("max_rollback", &CacheSpec::max_rollback,
                    "the most entries one cache_rollback may drop; a sliding cache keeps that many more")
      .def_readonly("widest_head_dim", &CacheSpec::widest_head_dim, "the widest head dim among the model's layers")
      .def_property_readonly("dtype", [](const CacheSpec& s) { return golden::dtype_name(s.dtype); }, "f32, bf16 or f16")
      .def_property_readonly("device", [](const CacheSpec& s) { return s.device.str(); });
  py::class_<DecodeAttentionSpec>(m, "DecodeAttentionSpec",
                                  "What cache_attention is told about the step's mask (reference/kv_cache.h).")
      .def_property_readonly("layer_type", [](const DecodeAttentionSpec& s) { return layer_type_name(s.type); })
      .def_readonly("sliding_window", &DecodeAttentionSpec::sliding_window,
                    "query index i sees key indices i - window + 1 .. i (sliding layers)")
      .def_readonly("start", &DecodeAttentionSpec::start, "the index of the step's first query")
      .def_property_readonly("padding", [](const DecodeAttentionSpec& s) { return to_python(s.padding); },
                             "[B, start + c] int64 over every index so far: 1 token, 0 padding (applies to keys)")
      .def_readonly("kv_shared", &DecodeAttentionSpec::kv_shared, "the layer reads its source layer's cache");
  py::class_<AttentionSpec>(m, "AttentionSpec",
                            "What an attention op is told about its mask (reference/ops.h AttentionSpec).")
      .def_property_readonly("layer_type", [](const AttentionSpec& s) { return layer_type_name(s.type); },
                             "'sliding_attention' or 'full_attention'")
      .def_readonly("sliding_window", &AttentionSpec::sliding_window,
                    "as in config.json: query i sees keys i - window + 1 .. i (sliding layers)")
      .def_readonly("bidirectional", &AttentionSpec::bidirectional, "use_bidirectional_attention == 'all'")
      .def_property_readonly("padding", [](const AttentionSpec& s) { return to_python(s.padding); },
                             "None, or [B, S] int64 with 1 for a token and 0 for padding (applies to keys)")
      .def_property_readonly("segments", [](const AttentionSpec& s) { return to_python(s.segments); },
                             "None, or [B, S] int64: the packed sequence of each token; a query sees its own "
                             "sequence's keys only")
      .def("__repr__", [](const AttentionSpec& s) {
        return std::string("AttentionSpec(layer_type='") + layer_type_name(s.type) + "', sliding_window=" + std::to_string(s.sliding_window) +
               ", bidirectional=" + (s.bidirectional ? "True" : "False") +
               ", padding=" + (s.padding.defined() ? "tensor" : "None") +
               ", segments=" + (s.segments.defined() ? "tensor" : "None") + ")";
      });
  py::class_<RopeTable>(m, "RopeTable",
                        "the tokens' RoPE rows in the model dtype, cat(freqs, freqs) for rotate_half: cos and sin "
                        "[S, D] (positions 0..S-1 in every batch row) or [B, S, D] (each row its own positions, "
                        "as in batched decoding)")
      .def_property_readonly("cos", [](const RopeTable& t) { return rope_rows(t).cos; })
      .def_property_readonly("sin", [](const RopeTable& t) { return rope_rows(t).sin; })
      .def_property_readonly("positions", [](const RopeTable& t) { return to_python(t.positions); },
                             "None, or [B, S] int64: each token's position (the row cos and sin hold for it)");
}

}  // namespace gemma4::python
