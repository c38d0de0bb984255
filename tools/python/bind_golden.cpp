// Goldens from Python: read one, and judge a candidate (an HDF5 file or a dict of tensors) against
// it under the tolerance policy, with the same rows, table, JSON and JUnit as `golden check`.
#include <sstream>

#include "golden/candidate.h"
#include "golden/catalogue.h"
#include "golden/data_dir.h"
#include "golden/golden_file.h"
#include "golden/model_cases.h"
#include "golden/weights_mode.h"
#include "reference/constructed_weights.h"
#include "reference/error.h"
#include "reference/files.h"
#include "tools/cli/golden_report.h"
#include "tools/python/bindings.h"

namespace py = pybind11;

namespace gemma4::python {
namespace {

// A judged candidate: the verdict table and where it came from.
struct CheckResult {
  std::string golden_path, candidate_label, dtype;
  golden::VerifyReport report;
  conformance::Run run;  // the report's rows (cli::check_run): the tensors, and a quantized file's weights
  int count(conformance::Status status) const {
    int n = 0;
    for (const conformance::Result& row : run.results) n += row.status == status;
    return n;
  }
};

py::dict to_python(const golden::TensorMap& tensors) {
  py::dict d;
  for (const auto& [name, t] : tensors) d[py::str(name)] = t;
  return d;
}

// nlohmann::json -> Python objects, through the json module (one conversion, no second serializer).
py::object to_python(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

golden::TensorMap candidate_from_dict(const py::dict& given) {
  golden::TensorMap candidate;
  for (const auto& [key, value] : given) {
    const std::string name = py::str(key);
    if (!THPVariable_Check(value.ptr())) throw Error("candidate dataset '" + name + "' is not a torch.Tensor");
    candidate[name] = THPVariable_Unpack(value.ptr()).detach().cpu();
  }
  return candidate;
}

CheckResult judge(const golden::GoldenCase& g, const std::string& golden_path, const py::object& candidate,
                  bool forward_only, const std::string& envelope) {
  CheckResult result{golden_path, "", g.dtype, {}, {}};
  golden::TensorMap tensors;
  if (py::isinstance<py::dict>(candidate)) {
    tensors = candidate_from_dict(candidate);
    result.candidate_label = "<dict>";
  } else {
    result.candidate_label = py::str(py::module_::import("os").attr("fspath")(candidate));
    py::gil_scoped_release no_gil;
    tensors = golden::read_candidate(result.candidate_label);
  }
  py::gil_scoped_release no_gil;
  result.report = golden::check_candidate(
      g, tensors, forward_only ? golden::CandidateScope::kForwardOnly : golden::CandidateScope::kForwardAndBackward);
  result.run = cli::check_run(result.candidate_label + " against " + golden_path, g, result.report, tensors, envelope, nullptr);
  return result;
}

// The weights a model case runs with: its weights/ group, the generated or constructed weights for
// its seed, or its checkpoint's, rounded to its dtype (float32 values).
golden::TensorMap model_weights(const golden::GoldenCase& g) {
  if (g.kind != "model") throw Error(g.name + " is a " + g.kind + " case: only model cases hold a whole model's weights");
  if (g.weights_mode == golden::WeightsMode::kStored) return g.weights;
  const Config config = parse_config(g.config);
  golden::TensorMap out =
      golden::weights_to_map(config, golden::model_weights(g, golden::dtype_from_name(g.dtype), torch::kCPU));
  for (auto& [name, t] : out) t = t.to(torch::kFloat32);
  return out;
}

golden::WeightsMode seeded_mode(const std::string& name) {
  for (golden::WeightsMode m : {golden::WeightsMode::kGenerated, golden::WeightsMode::kConstructed}) {
    if (name == golden::weights_mode_name(m)) return m;
  }
  throw Error("weights mode '" + name + "': expected 'generated' or 'constructed'");
}

// A judged candidate as the one report, as `golden check` writes it.
conformance::Report check_report(const CheckResult& r) {
  return {"golden check", {r.run}};
}

}  // namespace

void bind_golden(py::module_& m) {
  py::class_<golden::GoldenCase>(m, "Golden", "A golden case read from its HDF5 file (golden/FORMAT.md).")
      .def_readonly("kind", &golden::GoldenCase::kind, "'model', 'layer' or 'op'")
      .def_readonly("name", &golden::GoldenCase::name)
      .def_readonly("description", &golden::GoldenCase::description)
      .def_readonly("dtype", &golden::GoldenCase::dtype, "'f32', 'bf16' or 'f16'")
      .def_readonly("seed", &golden::GoldenCase::seed)
      .def_readonly("kv_key", &golden::GoldenCase::kv_key)
      .def_readonly("layer", &golden::GoldenCase::layer)
      .def_property_readonly("config", [](const golden::GoldenCase& g) { return to_python(g.config); })
      .def_property_readonly("generator", [](const golden::GoldenCase& g) { return g.provenance.generator; })
      .def_property_readonly("inputs", [](const golden::GoldenCase& g) { return to_python(g.inputs); })
      .def_property_readonly("weights", [](const golden::GoldenCase& g) { return to_python(g.weights); })
      .def_property_readonly("upstream", [](const golden::GoldenCase& g) { return to_python(g.upstream); })
      .def_property_readonly("expected", [](const golden::GoldenCase& g) { return to_python(g.expected); })
      .def_property_readonly("truth", [](const golden::GoldenCase& g) { return to_python(g.truth); })
      .def_property_readonly("judged", [](const golden::GoldenCase& g) { return to_python(g.judged); })
      .def_property_readonly("weights_mode", [](const golden::GoldenCase& g) { return weights_mode_name(g.weights_mode); },
                             "'stored', 'generated' or 'constructed' (FORMAT.md)")
      .def(
          "model_weights", [](const golden::GoldenCase& g) { return to_python(model_weights(g)); },
          "a model case's weights by checkpoint name, float32: stored, or recreated from the seed")
      .def("__repr__", [](const golden::GoldenCase& g) { return "Golden('" + g.name + "', " + g.dtype + ")"; });

  m.def(
      "read_golden",
      [](const std::string& path) {
        py::gil_scoped_release no_gil;
        return golden::read_untrusted_golden(path);
      },
      py::arg("path"));

  py::class_<CheckResult>(m, "CheckResult", "A candidate judged against a golden: one row per dataset.")
      .def_property_readonly("passed", [](const CheckResult& r) { return r.count(conformance::Status::kFail) == 0; })
      .def_property_readonly("failures", [](const CheckResult& r) { return r.count(conformance::Status::kFail); })
      .def_property_readonly("not_checked", [](const CheckResult& r) { return r.count(conformance::Status::kNotSupported); })
      .def(
          "to_dict",
          [](const CheckResult& r) { return to_python(conformance::to_json(check_report(r))); },
          "the verdict as the one report's JSON (conformance/report.h): {tool, passed, runs: [{subject, dtype, "
          "results: one row per dataset, test = its name}]}, as `golden check --report` writes it")
      .def("table",
           [](const CheckResult& r) {
             std::ostringstream out;
             cli::print_verify_table(r.report, out);
             return out.str();
           })
      .def("write_json",
           [](const CheckResult& r, const std::string& path) {
             conformance::write_json(path, conformance::to_json(check_report(r)));
           })
      .def("write_junit", [](const CheckResult& r, const std::string& path) {
        conformance::write_junit(path, check_report(r));
      });

  m.def(
      "seeded_weights",
      [](const py::object& config, uint64_t seed, const std::string& mode) {
        const nlohmann::json j = nlohmann::json::parse(py::str(py::module_::import("json").attr("dumps")(config)).cast<std::string>());
        const Config c = parse_config(j);
        return to_python(golden::weights_to_map(c, golden::seeded_weights(seeded_mode(mode), c, seed, torch::kFloat32, torch::kCPU)));
      },
      py::arg("config"), py::arg("seed"), py::arg("mode") = "constructed",
      "the generated or constructed weights of a text config (a dict) for a seed, float32, by checkpoint name");
  m.attr("constructed_bos_id") = kConstructedBosId;
  m.def("judge", &judge, py::arg("golden"), py::arg("golden_path"), py::arg("candidate"), py::arg("forward_only"),
        py::arg("envelope") = "");

  // The committed goldens, found in one place (golden/data_dir.h).
  py::enum_<golden::GoldenGroup>(m, "GoldenGroup", "op, model (golden/reference/...) or transformers (golden/transformers/<case>)")
      .value("op", golden::GoldenGroup::kOp)
      .value("model", golden::GoldenGroup::kModel)
      .value("transformers", golden::GoldenGroup::kTransformers);
  py::class_<golden::CommittedGolden>(m, "CommittedGolden", "a committed golden file: group, name, path, case_dir")
      .def_readonly("group", &golden::CommittedGolden::group)
      .def_readonly("name", &golden::CommittedGolden::name)
      .def_readonly("path", &golden::CommittedGolden::path)
      .def_readonly("case_dir", &golden::CommittedGolden::case_dir)
      .def("__repr__", [](const golden::CommittedGolden& g) { return "CommittedGolden(" + g.name + ")"; });
  m.def(
      "committed_goldens",
      [](const std::string& dtype) { return golden::committed_goldens(files::join(golden::data_dir(), "golden"), dtype); },
      py::arg("dtype"), "the committed goldens of a dtype (f32, bf16, f16) in the data directory, in group order");
}

}  // namespace gemma4::python
