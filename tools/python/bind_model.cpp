// What the model harness (gemma4_conform/model_checks.py) needs from the core: one run judged
// against another under the tolerance policy (conformance/compare.h: the rule the suite's
// multithreaded_recompute uses), the judged masks of a model's inputs, and the live bytes of the
// CPU allocator (conformance/tracking_allocator.h: the suite's memory_flatness reading).
#include <cmath>

#include "conformance/compare.h"
#include "conformance/tracking_allocator.h"
#include "golden/golden_file.h"
#include "golden/model_cases.h"
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

py::list rows_to_python(const std::vector<conformance::Result>& rows) {
  py::list out;
  for (const conformance::Result& row : rows) {
    py::dict d;
    d["case"] = row.case_name;
    d["status"] = conformance::status_name(row.status);
    d["metric"] = row.metric;
    d["value"] = row.value;
    d["bound"] = row.bound;
    d["baseline"] = std::isnan(row.baseline) ? py::object(py::none()) : py::object(py::float_(row.baseline));
    d["detail"] = row.detail;
    out.append(d);
  }
  return out;
}

py::list compare_runs(const py::dict& candidate, const py::dict& reference, const py::dict& truth,
                      const py::dict& judged, const std::string& dtype, bool bitwise) {
  const golden::TensorMap c = tensors_from(candidate, "candidate"), r = tensors_from(reference, "reference"),
                          t = tensors_from(truth, "truth"), j = tensors_from(judged, "judged");
  const torch::ScalarType type = golden::dtype_from_name(dtype);
  std::vector<conformance::Result> rows;
  {
    py::gil_scoped_release no_gil;
    rows = conformance::compare_runs(c, r, t, j, type, bitwise);
  }
  return rows_to_python(rows);
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
        "rows judging one run against another of the same implementation (conformance/compare.h); "
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
      .def("rows", [](const conformance::RunComparison& self) { return rows_to_python(self.rows()); });
  m.def(
      "model_judged",
      [](const py::dict& inputs, const py::dict& run) {
        py::dict out;
        for (const auto& [name, t] : golden::model_judged(tensors_from(inputs, "input"), tensors_from(run, "output")))
          out[py::str(name)] = t;
        return out;
      },
      py::arg("inputs"), py::arg("run"), "the judged/ masks of a model's inputs: padded positions are don't-care");
  m.def("install_tracking_cpu_allocator", &conformance::install_tracking_cpu_allocator,
        "count the CPU allocator's live bytes from now on (once per process)");
  m.def("tracked_cpu_live_bytes", &conformance::tracked_cpu_live_bytes);
}

}  // namespace gemma4::python
