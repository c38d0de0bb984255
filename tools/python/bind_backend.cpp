// Backends from Python callables, the engine (conformance/engine.h) that judges them, and the CLI's
// commands run from Python. The GIL is released while C++ runs, so that Python ops called from other
// threads (two models in two threads, autograd's device thread) can take it.
#include <pybind11/stl.h>

#include <iostream>

#include "conformance/engine.h"
#include "conformance/report.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"
#include "tools/python/bindings.h"
#include "tools/python/python_backend.h"

namespace py = pybind11;

namespace gemma4::python {
namespace {

// Runs C++ with the GIL released, after Python's buffered output and before anything the caller
// prints next, so that the two streams interleave in order.
template <typename F>
auto run_released(const F& run) {
  py::module_::import("sys").attr("stdout").attr("flush")();
  py::gil_scoped_release no_gil;
  auto result = run();
  std::cout.flush();
  return result;
}

// The worker of the engine's child processes from Python: this interpreter running the package,
// which runs in-tree backends and plugins as the CLI does and loads MODULE:FACTORY backends too.
cli::Invocation invocation(const std::string& program) {
  const std::string python = py::module_::import("sys").attr("executable").cast<std::string>();
  return {program, {python, "-m", "gemma4_conform"}};
}

}  // namespace

void bind_backend(py::module_& m) {
  bind_op_arguments(m);
  py::class_<impl::Backend>(m, "CppBackend", "A backend as the C++ suite holds it")
      .def_readonly("name", &impl::Backend::name)
      .def_readonly("description", &impl::Backend::description)
      .def_property_readonly("kind", [](const impl::Backend& b) { return impl::backend_kind_name(b.kind); });
  m.def(
      "builtin_backends",
      [] {
        py::list out;
        for (const impl::Backend& b : impl::builtin_backends()) {
          py::list fails_in;
          for (impl::Category c : b.fails_in) fails_in.append(conformance::category_name(c));
          out.append(py::dict(py::arg("name") = b.name, py::arg("kind") = impl::backend_kind_name(b.kind),
                              py::arg("description") = b.description, py::arg("fails_in") = fails_in,
                              py::arg("below_reduced_precision") = b.below_reduced_precision));
        }
        return out;
      },
      "the in-tree backends as `gemma4-conform backends` lists them: name, kind, description, the categories a "
      "faulty one must fail, and whether its bug is below bf16/f16 resolution");
  m.def("make_backend", &make_backend, py::arg("name"), py::arg("description"), py::arg("ops"),
        py::arg("capabilities"));

  py::class_<conformance::Subject>(m, "Subject", "A backend for the engine, and how a worker process selects it")
      .def(py::init([](const impl::Backend& b, std::vector<std::string> select) { return conformance::Subject{b, std::move(select)}; }),
           py::arg("backend"), py::arg("select") = std::vector<std::string>{})
      .def_property_readonly("name", [](const conformance::Subject& s) { return s.backend.name; })
      .def_readonly("select", &conformance::Subject::select);
  m.def("in_tree_subjects", &conformance::in_tree_subjects, py::arg("spec"),
        "the in-tree backends a name, a regex or 'all' selects (conform --backend)");
  m.def("plugin_subject", &conformance::plugin_subject, py::arg("path"), "a backend plugin (.so) as a subject");
  m.def(
      "run_engine",
      [](const std::vector<conformance::Subject>& subjects, const std::vector<std::string>& devices,
         const std::vector<std::string>& dtypes, const std::string& isa, const std::string& filter, int steps,
         bool isolate, int jobs, double timeout, const std::map<std::string, std::string>& child_env,
         bool expect_declared, bool verbose, bool quiet, const std::string& golden_dir) {
        conformance::EngineOptions o;
        o.subjects = subjects;
        o.devices.clear(), o.dtypes.clear();
        try {
          for (const std::string& d : devices) o.devices.push_back(cli::parse_device(d));
          for (const std::string& d : dtypes) o.dtypes.push_back(cli::parse_dtype(d));
        } catch (const cli::UsageError& e) {
          throw py::value_error(e.message);
        }
        o.isas = conformance::parse_isa_levels(isa);
        o.filter = filter, o.steps = steps, o.isolate = isolate, o.jobs = jobs, o.timeout = timeout;
        o.worker = invocation("gemma4_conform").worker;
        o.child_env = child_env;
        o.expect_declared = expect_declared;
        o.golden_dir = golden_dir;
        o.all_rows = verbose;
        if (!quiet) o.rows_out = &std::cout;
        return run_released([&] {
          conformance::Report report = conformance::run_engine(o).report;
          if (!quiet) conformance::print_conclusion(std::cout, report, expect_declared);
          return report;
        });
      },
      py::arg("subjects"), py::kw_only(), py::arg("devices") = std::vector<std::string>{"cpu"},
      py::arg("dtypes") = std::vector<std::string>{"f32"}, py::arg("isa") = "native", py::arg("filter") = "",
      py::arg("steps") = 0, py::arg("isolate") = false, py::arg("jobs") = 1, py::arg("timeout") = 1800.0,
      py::arg("child_env") = std::map<std::string, std::string>{}, py::arg("expect_declared") = false,
      py::arg("verbose") = false, py::arg("quiet") = false, py::arg("golden_dir") = "",
      "the engine (conformance/engine.h): plans, runs and judges; returns the Report");
  m.def(
      "run_command",
      [](const std::string& program, const std::vector<std::string>& args) {
        const cli::Invocation who = invocation(program);
        return run_released([&] { return cli::run_command(who, args); });
      },
      py::arg("program"), py::arg("args"), "the CLI: args[0] names the command; returns the exit code");
  m.def(
      "conform",
      [](const std::string& program, const std::vector<std::string>& args, const impl::Backend& backend,
         const std::string& spec) {
        const cli::Invocation who = invocation(program);
        const conformance::Subject given{backend, spec.empty() ? std::vector<std::string>{}
                                                               : std::vector<std::string>{"--backend", spec}};
        return run_released(
            [&] { return cli::guarded(program, "conform", [&] { return cli::conform_command(args, who, &given); }); });
      },
      py::arg("program"), py::arg("args"), py::arg("backend"), py::arg("spec") = "",
      "`conform` with a backend made in Python (args: the options after 'conform'; spec: its MODULE:FACTORY, "
      "which child processes load); returns the exit code");
}

}  // namespace gemma4::python
