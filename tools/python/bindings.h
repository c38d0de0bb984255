#pragma once
// The parts of the _core module, one function each (core_module.cpp calls them).
#include <torch/python.h>

namespace gemma4::python {

// read_golden, judge and their result types (bind_golden.cpp).
void bind_golden(pybind11::module_& m);
// Backends from Python callables, the suite and the CLI's commands (bind_backend.cpp).
void bind_backend(pybind11::module_& m);
// Run-against-run judgement, judged masks and the CPU allocator's live bytes, for the model
// harness (bind_model.cpp).
void bind_model(pybind11::module_& m);

}  // namespace gemma4::python
