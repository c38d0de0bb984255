// gemma4_conform._core: the C++ core as a Python extension module. The Python package
// (gemma4_conform/__init__.py) is the interface users read; this module only binds.
#include <torch/python.h>

#include "golden/data_dir.h"
#include "tools/python/bindings.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "gemma4-conformance's C++ core: goldens, the tolerance policy, the suite and the CLI's commands";
  m.def("set_data_dir", &gemma4::golden::set_data_dir, pybind11::arg("dir"),
        "read the goldens and released configs from dir (golden/, reference/configs/); the package does this on import");
  m.def("data_dir", &gemma4::golden::data_dir);
  gemma4::python::bind_report(m);  // first: the other parts' functions take and return its rows
  gemma4::python::bind_golden(m);
  gemma4::python::bind_backend(m);
  gemma4::python::bind_model(m);
}
