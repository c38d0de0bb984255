#pragma once
// A Backend whose ops are Python callables (gemma4_conform.Backend): every op the Python side gives
// replaces the reference's, with the tensor contracts of reference/layer_ops.h.
#include <torch/python.h>

#include <string>

#include "impl/backend.h"

namespace gemma4::python {

// `ops`: op name ("rms_norm", "qk_norm_rope", "attention", "geglu", "moe_experts") -> callable;
// `capabilities`: {"devices": [...], "dtypes": [...], "head_dims": [...], "max_sliding_window": int,
// "deterministic": bool}, names as the CLI spells them ("cpu", "cuda"; "f32", "bf16", "f16").
// Throws gemma4::Error naming an unknown op, a value that is not callable, or a bad capability.
impl::Backend make_backend(const std::string& name, const std::string& description, const pybind11::dict& ops,
                           const pybind11::dict& capabilities);

// What a Python op receives for `spec` and `rope` (registered in the module by bind_backend.cpp).
void bind_op_arguments(pybind11::module_& m);

}  // namespace gemma4::python
