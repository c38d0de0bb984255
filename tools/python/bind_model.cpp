// What the model harness (gemma4_conform/model_checks.py) needs from the core: one run judged
// against another under the tolerance policy (conformance/compare.h: the rule the suite's
// multithreaded_recompute uses), as the report's rows; the judged masks of a model's inputs; the
// live bytes of the CPU allocator (impl/memory/tracking_allocator.h: the suite's memory_flatness
// reading) and the memory-flatness rule itself (conformance/flatness.h).
#include <pybind11/stl.h>

#include "conformance/compare.h"
#include "conformance/flatness.h"
#include "golden/golden_file.h"
#include "golden/model_cases.h"
#include "impl/memory/tracking_allocator.h"
#include "reference/error.h"
#include "tools/python/bindings.h"

namespace py = pybind11;

namespace gemma4::python {
namespace {

golden::TensorMap tensors_from(const py::dict& given, const char* what) {
  golden::TensorMap out;
  for (const auto& [key, value] : given) {
    const std::string name = py::str(key);
    if (!THPVariable_Check(value.ptr())) throw Error(std::string(what) + " '" + name + "' is not a torch.Tensor");
    out[name] = THPVariable_Unpack(value.ptr()).detach().cpu();
  }
  return out;
}

std::vector<conformance::Result> compare_runs(const py::dict& candidate, const py::dict& reference, const py::dict& truth,
                      const py::dict& judged, const std::string& dtype, bool bitwise) {
  const golden::TensorMap c = tensors_from(candidate, "candidate"), r = tensors_from(reference, "reference"),
                          t = tensors_from(truth, "truth"), j = tensors_from(judged, "judged");
  const torch::ScalarType type = golden::dtype_from_name(dtype);
  py::gil_scoped_release no_gil;
  return conformance::compare_runs(c, r, t, j, type, bitwise);
}

// A tensor argument that may be None (undefined), kept on its device.
torch::Tensor optional_tensor(const py::object& value, const char* what) {
  if (value.is_none()) return torch::Tensor();
  if (!THPVariable_Check(value.ptr())) throw Error(std::string(what) + " is not a torch.Tensor");
  return THPVariable_Unpack(value.ptr()).detach();
}

}  // namespace

void bind_model(py::module_& m) {
  m.def("compare_runs", &compare_runs, py::arg("candidate"), py::arg("reference"), py::arg("truth"),
        py::arg("judged"), py::arg("dtype"), py::arg("bitwise") = false,
        "rows (Result) judging one run against another of the same implementation (conformance/compare.h); "
        "truth: the fp32 run, needed in bf16/f16");
  py::class_<conformance::RunComparison>(
      m, "RunComparison",
      "compare_runs one tensor at a time, on the tensors' own device: add(name, candidate, reference, truth, "
      "judged) keeps only the verdict; rows() gives compare_runs' rows")
      .def(py::init([](const std::string& dtype, bool bitwise) {
             return conformance::RunComparison(golden::dtype_from_name(dtype), bitwise);
           }),
           py::arg("dtype"), py::arg("bitwise") = false)
      .def(
          "add",
          [](conformance::RunComparison& self, const std::string& name, const py::object& candidate,
             const py::object& reference, const py::object& truth, const py::object& judged) {
            const torch::Tensor c = optional_tensor(candidate, "candidate"), t = optional_tensor(truth, "truth"),
                                j = optional_tensor(judged, "judged"), r = optional_tensor(reference, "reference");
            if (!r.defined()) throw Error("RunComparison.add('" + name + "'): the reference is None");
            py::gil_scoped_release no_gil;
            self.add(name, c, r, t, j);
          },
          py::arg("name"), py::arg("candidate"), py::arg("reference"), py::arg("truth") = py::none(),
          py::arg("judged") = py::none())
      .def("rows", &conformance::RunComparison::rows, "compare_runs' rows (Result)");
  m.def(
      "model_judged",
      [](const py::dict& inputs, const py::dict& run, int64_t pad_token_id) {
        py::dict out;
        for (const auto& [name, t] :
             golden::model_judged(tensors_from(inputs, "input"), tensors_from(run, "output"), pad_token_id))
          out[py::str(name)] = t;
        return out;
      },
      py::arg("inputs"), py::arg("run"), py::arg("pad_token_id") = -1,
      "the judged/ masks of a model's inputs: padded positions are don't-care, and the pad row of the "
      "embedding gradients when the pad id is at a real position");
  m.def("install_tracking_cpu_allocator", &memory::install_tracking_cpu_allocator,
        "count the CPU allocator's live bytes from now on (once per process)");
  m.def("tracked_cpu_live_bytes", &memory::tracked_cpu_live_bytes);

  // The memory-flatness rule (conformance/flatness.h), the suite's, for conform-model.
  using conformance::FlatnessRule;
  m.def(
      "flatness_default_steps", [](const std::string& device) { return FlatnessRule::default_steps(device != "cpu"); },
      py::arg("device"), "memory_flatness steps when none are given: 50 on the CPU, 200 on CUDA");
  m.def("require_flatness_steps", &FlatnessRule::require_steps, py::arg("steps"),
        "raises naming the minimum when `steps` are too few for the rule's warm-up and fit");
  m.def(
      "judge_flatness",
      [](const std::vector<int64_t>& live_bytes, double kv_bytes, const std::string& kv_about) {
        return conformance::judge_flatness(live_bytes, kv_bytes, kv_about);
      },
      py::arg("live_bytes_per_step"), py::arg("kv_bytes"), py::arg("kv_about") = "one step's shared K/V",
      "the rule's row (Result: slope_bytes_per_step against 1% of kv_bytes) for the live bytes read after each "
      "step, warm-up included");
  m.def(
      "shared_kv_bytes",
      [](const py::dict& config, int64_t batch, int64_t seq, const std::string& dtype) {
        return conformance::shared_kv_bytes(parse_config(json_from_python(config)), batch, seq,
                                            golden::dtype_from_name(dtype));
      },
      py::arg("config"), py::arg("batch"), py::arg("seq"), py::arg("dtype"),
      "one step's shared K/V in bytes (0 when the config shares none)");
  m.def(
      "layer_kv_bytes",
      [](const py::dict& config, int layer, int64_t batch, int64_t seq, const std::string& dtype) {
        return conformance::layer_kv_bytes(parse_config(json_from_python(config)), layer, batch, seq,
                                           golden::dtype_from_name(dtype));
      },
      py::arg("config"), py::arg("layer"), py::arg("batch"), py::arg("seq"), py::arg("dtype"),
      "one step's K/V of one layer in bytes");
}

}  // namespace gemma4::python
