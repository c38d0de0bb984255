// The project's one report module (conformance/report.h) from Python: the suite's categories and
// statuses, the result row, and the table, summary, matrix, JSON and JUnit of a report given as a
// Python dict in the report's JSON schema ({"tool", "runs": [{"subject", "device", "dtype",
// "results": [rows], "error"?, "seconds"?}]}, a row as Result.to_dict() gives it, or a Result).
// The model harness (conform-model and its --distributed mode) writes through these, so its table,
// JSON and JUnit are the suite's own.
#include <pybind11/stl.h>

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>

#include "conformance/check.h"
#include "conformance/report.h"
#include "conformance/engine.h"
#include "conformance/verdict.h"
#include "reference/error.h"
#include "tools/python/bindings.h"

namespace py = pybind11;

namespace gemma4::python {

nlohmann::json json_from_python(const py::handle& value) {
  if (value.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) {
    const double v = value.cast<double>();  // as the report writes numbers: NaN null, infinities "inf"/"-inf"
    if (std::isnan(v)) return nullptr;
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return v;
  }
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<conformance::Result>(value)) return conformance::to_json(value.cast<conformance::Result>());
  if (py::isinstance<conformance::Category>(value)) return conformance::category_name(value.cast<conformance::Category>());
  if (py::isinstance<conformance::Status>(value)) return conformance::status_name(value.cast<conformance::Status>());
  if (py::isinstance<py::dict>(value)) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, item] : value.cast<py::dict>()) out[py::str(key).cast<std::string>()] = json_from_python(item);
    return out;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    nlohmann::json out = nlohmann::json::array();
    for (const py::handle& item : value) out.push_back(json_from_python(item));
    return out;
  }
  throw Error("cannot write a " + py::type::of(value).attr("__name__").cast<std::string>() + " into a report");
}

py::object python_from_json(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

namespace {

using conformance::Category;
using conformance::Report;
using conformance::Result;
using conformance::Status;

// The canonical JSON of a report (tests, failed tests and verdicts derived by the report module),
// keeping the keys the caller added to the report and to each run (notes, seconds per test, ...).
nlohmann::json canonical(const nlohmann::json& given) {
  nlohmann::json out = conformance::to_json(conformance::report_from_json(given));
  for (const auto& [key, value] : given.items()) {
    if (!out.contains(key)) out[key] = value;
  }
  for (size_t i = 0; i < out["runs"].size(); ++i) {
    for (const auto& [key, value] : given["runs"][i].items()) {
      if (!out["runs"][i].contains(key)) out["runs"][i][key] = value;
    }
  }
  return out;
}

Report report_from(const py::handle& report) { return conformance::report_from_json(json_from_python(report)); }

// Prints what `print` writes to an ostream on Python's sys.stdout, in order with Python's prints.
void print_python(const std::function<void(std::ostream&)>& print) {
  std::ostringstream out;
  print(out);
  py::module_::import("sys").attr("stdout").attr("write")(out.str());
}

double baseline_from(const py::object& value) {
  return value.is_none() ? std::numeric_limits<double>::quiet_NaN() : value.cast<double>();
}

}  // namespace

void bind_report(py::module_& m) {
  py::enum_<Category> category(m, "Category", "The suite's categories, named as in a test '<category>/<check>'");
  for (const conformance::CategoryInfo& info : conformance::categories()) category.value(info.name, info.category);
  // Not the JSON names "pass" etc.: `pass` is a Python keyword. status_name() gives the JSON name.
  py::enum_<Status>(m, "Status", "A row's verdict: PASS, FAIL, NOT_SUPPORTED (JSON: pass, fail, not_supported)")
      .value("PASS", Status::kPass)
      .value("FAIL", Status::kFail)
      .value("NOT_SUPPORTED", Status::kNotSupported);
  m.def("category_name", &conformance::category_name, py::arg("category"));
  m.def("status_name", &conformance::status_name, py::arg("status"));
  m.def(
      "parse_category",
      [](const std::string& name) {
        const std::optional<Category> c = conformance::parse_category(name);
        if (!c) throw py::value_error("'" + name + "' is not one of the suite's categories");
        return *c;
      },
      py::arg("name"));

  py::class_<Result>(m, "Result",
                     "One row of the report (conformance/report.h): test, category (None outside the suite's), "
                     "case, status, metric, value, bound, baseline (None where there is none), detail")
      .def(py::init([](std::string test, std::optional<Category> category, std::string case_name, Status status,
                       std::string metric, double value, double bound, const py::object& baseline,
                       std::string detail) {
             Result r;
             r.test = std::move(test), r.category = category, r.case_name = std::move(case_name), r.status = status;
             r.metric = std::move(metric), r.value = value, r.bound = bound, r.baseline = baseline_from(baseline);
             r.detail = std::move(detail);
             return r;
           }),
           py::kw_only(), py::arg("test") = "", py::arg("category") = py::none(), py::arg("case") = "",
           py::arg("status") = Status::kPass, py::arg("metric") = "", py::arg("value") = 0.0,
           py::arg("bound") = 0.0, py::arg("baseline") = py::none(), py::arg("detail") = "")
      .def_readwrite("test", &Result::test)
      .def_readwrite("category", &Result::category)
      .def_readwrite("case", &Result::case_name)
      .def_readwrite("status", &Result::status)
      .def_readwrite("metric", &Result::metric)
      .def_readwrite("value", &Result::value)
      .def_readwrite("bound", &Result::bound)
      .def_property(
          "baseline", [](const Result& r) { return std::isnan(r.baseline) ? py::object(py::none()) : py::float_(r.baseline); },
          [](Result& r, const py::object& value) { r.baseline = baseline_from(value); })
      .def_readwrite("detail", &Result::detail)
      .def("ratio", &Result::ratio, "how close the value came to its bound (conformance/report.h, Result::ratio)")
      .def_static(
          "from_dict", [](const py::dict& row) { return conformance::result_from_json(json_from_python(row)); },
          py::arg("row"), "a report's JSON row (to_dict's form) as a Result")
      .def("to_dict", [](const Result& r) { return python_from_json(conformance::to_json(r)); },
           "the row as the JSON report has it")
      .def_static(
          "from_dict", [](const py::dict& d) { return conformance::result_from_json(json_from_python(d)); },
          py::arg("row"), "a row from its JSON form; raises naming the missing or bad field")
      .def("__repr__", [](const Result& r) { return "Result(" + conformance::to_json(r).dump() + ")"; });

  m.def(
      "report_dict", [](const py::dict& report) { return python_from_json(canonical(json_from_python(report))); },
      py::arg("report"),
      "the report in its canonical JSON form: each run's tests, failed_tests and passed, and the report's passed, "
      "derived by the report module; other keys the caller added are kept");
  m.def(
      "print_rows",
      [](const py::dict& report, bool all_rows) {
        const Report r = report_from(report);
        print_python([&](std::ostream& out) {
          for (const conformance::Run& run : r.runs) conformance::print_rows(out, run, all_rows);
        });
      },
      py::arg("report"), py::arg("all_rows") = false, "each run's failing rows (all_rows: every row) on sys.stdout");
  m.def(
      "print_summary",
      [](const py::dict& report) {
        const Report r = report_from(report);
        print_python([&](std::ostream& out) {
          for (const conformance::Run& run : r.runs) conformance::print_summary(out, run);
        });
      },
      py::arg("report"), "each run's summary by category and verdict on sys.stdout");
  m.def(
      "print_matrix",
      [](const py::dict& report) {
        const Report r = report_from(report);
        print_python([&](std::ostream& out) { conformance::print_matrix(out, r); });
      },
      py::arg("report"), "the runs side by side, a column per category, on sys.stdout");
  m.def(
      "write_report_json",
      [](const py::dict& report, const std::string& path) {
        conformance::write_json(path, canonical(json_from_python(report)));
      },
      py::arg("report"), py::arg("path"), "the canonical JSON report (report_dict) to path");
  m.def(
      "write_junit", [](const py::dict& report, const std::string& path) { conformance::write_junit(path, report_from(report)); },
      py::arg("report"), py::arg("path"), "the project's one JUnit writer");

  // A run and a report as objects: what gemma4_conform.conform() returns.
  py::class_<conformance::Run>(m, "Run", "One subject judged on one device in one dtype (conformance/report.h)")
      .def_readonly("subject", &conformance::Run::subject)
      .def_readonly("device", &conformance::Run::device)
      .def_readonly("dtype", &conformance::Run::dtype)
      .def_readonly("kind", &conformance::Run::kind)
      .def_readonly("isa", &conformance::Run::isa)
      .def_readonly("error", &conformance::Run::error)
      .def_readonly("seconds", &conformance::Run::seconds)
      .def_readonly("results", &conformance::Run::results)
      .def_property_readonly("passed", &conformance::Run::passed)
      .def_property_readonly("tests", &conformance::Run::tests)
      .def_property_readonly("failed_tests", &conformance::Run::failed_tests)
      .def_property_readonly("label", &conformance::Run::label)
      .def_static(
          "from_dict", [](const py::dict& run) { return conformance::run_from_json(json_from_python(run)); },
          py::arg("run"), "a run from the report's JSON form; raises naming the missing or bad field")
      .def("to_dict", [](const conformance::Run& r) { return python_from_json(conformance::to_json(r)); })
      .def("__repr__", [](const conformance::Run& r) { return "Run(" + r.label() + (r.passed() ? ", passed)" : ", failed)"); });
  py::class_<Report>(m, "Report", "A command's verdicts: its runs (conformance/report.h)")
      .def_readonly("tool", &Report::tool)
      .def_readonly("runs", &Report::runs)
      .def_property_readonly("passed", &Report::passed, "every run passed")
      .def_property_readonly(
          "results",
          [](const Report& r) {
            std::vector<Result> rows;
            for (const conformance::Run& run : r.runs) rows.insert(rows.end(), run.results.begin(), run.results.end());
            return rows;
          },
          "every row of every run")
      .def_property_readonly(
          "failures",
          [](const Report& r) {
            std::vector<Result> rows;
            for (const conformance::Run& run : r.runs) {
              for (const Result& row : run.results) {
                if (row.status == Status::kFail) rows.push_back(row);
              }
            }
            return rows;
          },
          "the failing rows of every run")
      .def_property_readonly(
          "exit_code",
          [](const Report& r) {
            bool declared = !r.runs.empty();
            for (const conformance::Run& run : r.runs) declared &= run.declared.has_value();
            return conformance::exit_code(r, declared);
          },
          "as the CLI's: 0 when every run passed (judged against declarations: behaved as declared), else 1")
      .def_static(
          "from_dict", [](const py::dict& report) { return conformance::report_from_json(json_from_python(report)); },
          py::arg("report"))
      .def("to_dict", [](const Report& r) { return python_from_json(conformance::to_json(r)); },
           "the report's JSON form (conformance/report.h)")
      .def("write_json", [](const Report& r, const std::string& path) { conformance::write_json(path, conformance::to_json(r)); },
           py::arg("path"))
      .def("write_junit", [](const Report& r, const std::string& path) { conformance::write_junit(path, r); }, py::arg("path"))
      .def("__repr__", [](const Report& r) {
        return "Report(" + r.tool + ", " + std::to_string(r.runs.size()) + " runs, " + (r.passed() ? "passed)" : "failed)");
      });
  m.def(
      "category_verdict",
      [](const conformance::Run& run, Category category) {
        const conformance::CategoryVerdict v = conformance::category_verdict(run, category);
        py::list failing;
        for (const Result& r : v.failing) failing.append(python_from_json(conformance::to_json(r)));
        return py::dict(py::arg("verdict") = conformance::category_state_name(v.state), py::arg("tests") = v.tests,
                        py::arg("judged_tests") = v.judged_tests, py::arg("failed_tests") = v.failed_tests,
                        py::arg("worst_ratio") = v.worst_ratio, py::arg("worst_at") = v.worst_at,
                        py::arg("failing") = failing, py::arg("why") = v.why);
      },
      py::arg("run"), py::arg("category"),
      "one category of a run read from its rows (conformance/verdict.h): verdict pass, fail, not_supported or "
      "not_run; tests, judged_tests, failed_tests; for a failure the worst ratio, where, and the failing rows "
      "(largest ratio first); for not supported, why");
}

}  // namespace gemma4::python
