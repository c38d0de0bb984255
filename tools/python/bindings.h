#pragma once
// The parts of the _core module, one function each (core_module.cpp calls them).
#include <nlohmann/json.hpp>
#include <torch/python.h>

namespace gemma4::python {

// read_golden, judge and their result types (bind_golden.cpp).
void bind_golden(pybind11::module_& m);
// Backends from Python callables, the suite and the CLI's commands (bind_backend.cpp).
void bind_backend(pybind11::module_& m);
// The report module: categories, statuses, result rows, the table, JSON and JUnit (bind_report.cpp).
void bind_report(pybind11::module_& m);
// Run-against-run judgement, judged masks and the CPU allocator's live bytes, for the model
// harness (bind_model.cpp).
void bind_model(pybind11::module_& m);

// A Python value (dicts, lists, numbers, strings, None, Result rows) as JSON, numbers as the report
// writes them (NaN null, infinities "inf"); and JSON back as Python objects (bind_report.cpp).
nlohmann::json json_from_python(const pybind11::handle& value);
pybind11::object python_from_json(const nlohmann::json& j);

}  // namespace gemma4::python
