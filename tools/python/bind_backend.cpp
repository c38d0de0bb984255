// Backends from Python callables, and the CLI's commands (conform among them) run from Python. The
// GIL is released while C++ runs, so that Python ops called from other threads (two models in two
// threads, autograd's device thread) can take it.
#include <iostream>

#include "conformance/report.h"
#include "tools/cli/commands.h"
#include "tools/python/bindings.h"
#include "tools/python/python_backend.h"

namespace py = pybind11;

namespace gemma4::python {
namespace {

// Runs a command with the GIL released, after Python's buffered output and before anything the
// caller prints next, so that the two streams interleave in order.
int run_released(const std::function<int()>& run) {
  py::module_::import("sys").attr("stdout").attr("flush")();
  int status;
  {
    py::gil_scoped_release no_gil;
    status = run();
    std::cout.flush();
  }
  return status;
}

}  // namespace

void bind_backend(py::module_& m) {
  bind_op_arguments(m);
  py::class_<impl::Backend>(m, "CppBackend", "A backend as the C++ suite holds it")
      .def_readonly("name", &impl::Backend::name)
      .def_readonly("description", &impl::Backend::description);
  m.def(
      "builtin_backends",
      [] {
        py::list out;
        for (const impl::Backend& b : impl::builtin_backends()) {
          py::list fails_in;
          for (impl::Category c : b.fails_in) fails_in.append(conformance::category_name(c));
          out.append(py::dict(py::arg("name") = b.name, py::arg("kind") = impl::backend_kind_name(b.kind),
                              py::arg("fails_in") = fails_in,
                              py::arg("below_reduced_precision") = b.below_reduced_precision));
        }
        return out;
      },
      "the in-tree backends as `gemma4-conform backends` lists them: name, kind, the categories a faulty one "
      "must fail, and whether its bug is below bf16/f16 resolution");
  m.def("make_backend", &make_backend, py::arg("name"), py::arg("description"), py::arg("ops"),
        py::arg("capabilities"));
  m.def(
      "run_command",
      [](const std::string& program, const std::vector<std::string>& args) {
        return run_released([&] { return cli::run_command(program, args); });
      },
      py::arg("program"), py::arg("args"), "the CLI: args[0] names the command; returns the exit code");
  m.def(
      "conform",
      [](const std::string& program, const std::vector<std::string>& args, const impl::Backend& backend) {
        return run_released(
            [&] { return cli::guarded(program, "conform", [&] { return cli::conform_command(args, &backend); }); });
      },
      py::arg("program"), py::arg("args"), py::arg("backend"),
      "`conform` with a backend made in Python (args: the options after 'conform'); returns the exit code");
}

}  // namespace gemma4::python
