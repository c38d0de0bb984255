#include "conformance/report.h"

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "conformance/verdict.h"
#include "reference/error.h"
#include "reference/text.h"

namespace gemma4::conformance {
namespace {

using text::pad;
using text::sci;
using text::xml_escape;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// JSON has no NaN or infinity: NaN is written as null, infinities as the strings "inf"/"-inf".
nlohmann::json number(double v) {
  if (std::isnan(v)) return nullptr;
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double number_from(const nlohmann::json& j, const char* field) {
  if (j.is_null()) return kNaN;
  if (j.is_number()) return j.get<double>();
  if (j == "inf") return std::numeric_limits<double>::infinity();
  if (j == "-inf") return -std::numeric_limits<double>::infinity();
  throw Error(std::string("field '") + field + "' is not a number");
}

template <typename T>
T field(const nlohmann::json& j, const char* name, const char* what) {
  if (!j.is_object()) throw Error(std::string(what) + " is not a JSON object");
  if (!j.contains(name)) throw Error(std::string(what) + " has no field '" + name + "'");
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(std::string(what) + "'s field '" + name + "' has the wrong type");
  }
}

std::string optional_text(const nlohmann::json& j, const char* name) {
  return j.contains(name) && j.at(name).is_string() ? j.at(name).get<std::string>() : "";
}

// The rows of one test, in the order recorded (a test's rows are contiguous or not: grouped here).
std::vector<std::pair<std::string, std::vector<const Result*>>> by_test(const Run& run) {
  std::vector<std::pair<std::string, std::vector<const Result*>>> tests;
  std::map<std::string, size_t> index;
  for (const Result& r : run.results) {
    auto [it, fresh] = index.emplace(r.test, tests.size());
    if (fresh) tests.push_back({r.test, {}});
    tests[it->second].second.push_back(&r);
  }
  return tests;
}

std::string failure_line(const Result& r) {
  std::string line = r.case_name.empty() ? "" : r.case_name + ": ";
  if (!r.metric.empty()) line += r.metric + " " + sci(r.value) + " > bound " + sci(r.bound);
  if (!r.detail.empty()) line += (r.metric.empty() ? "" : "; ") + r.detail;
  return line;
}

}  // namespace

const char* status_name(Status status) {
  switch (status) {
    case Status::kPass: return "pass";
    case Status::kFail: return "fail";
    case Status::kNotSupported: return "not_supported";
  }
  return "?";
}

std::optional<Status> parse_status(const std::string& name) {
  for (Status s : {Status::kPass, Status::kFail, Status::kNotSupported}) {
    if (name == status_name(s)) return s;
  }
  return std::nullopt;
}

const char* expectation_name(Expectation e) {
  switch (e) {
    case Expectation::kPass: return "pass";
    case Expectation::kFail: return "fail";
    case Expectation::kMayPass: return "may pass";
  }
  return "?";
}

const char* declared_outcome_name(DeclaredOutcome o) {
  switch (o) {
    case DeclaredOutcome::kAsDeclared: return "as_declared";
    case DeclaredOutcome::kNotAsDeclared: return "not_as_declared";
    case DeclaredOutcome::kNotRun: return "not_run";
  }
  return "?";
}

double Result::ratio() const {
  if (std::isnan(value)) return std::numeric_limits<double>::infinity();
  if (bound > 0) return value / bound;
  // A count or a bitwise comparison (bound 0, or no measurement): the verdict decides.
  return status == Status::kPass ? 0.0 : std::numeric_limits<double>::infinity();
}

int Run::tests() const { return static_cast<int>(by_test(*this).size()) + (error.empty() ? 0 : 1); }

int Run::failed_tests() const {
  std::set<std::string> failed;
  for (const Result& r : results) {
    if (r.status == Status::kFail) failed.insert(r.test);
  }
  return static_cast<int>(failed.size()) + (error.empty() ? 0 : 1);
}

bool Run::failed_in(Category category) const {
  for (const Result& r : results) {
    if (r.status == Status::kFail && r.category == category) return true;
  }
  return false;
}

std::string Run::label() const {
  std::string out = subject;
  for (const std::string* part : {&device, &dtype}) {
    if (!part->empty()) out += ", " + *part;
  }
  if (!isa.empty() && isa != "native") out += " @" + isa;
  return out;
}

bool Report::passed() const {
  for (const Run& run : runs) {
    if (!run.passed()) return false;
  }
  return !runs.empty();
}

// ---- the table -------------------------------------------------------------------------------

void print_row(std::ostream& out, const Result& r) {
  const char* verdict = r.status == Status::kPass ? "OK" : r.status == Status::kFail ? "FAIL" : "not supported";
  out << "  " << pad(r.test, 52) << " " << pad(r.case_name, 44) << " ";
  if (r.status == Status::kNotSupported) {
    out << verdict << " (" << r.detail << ")\n";
    return;
  }
  if (!r.metric.empty()) {
    out << pad(r.metric + "=" + sci(r.value), 18) << " "
        << pad(std::isnan(r.baseline) ? "" : "baseline=" + sci(r.baseline), 19) << " " << pad("bound=" + sci(r.bound), 16)
        << " ";
  }
  out << verdict;
  if (!r.detail.empty()) out << "  " << r.detail;
  out << "\n";
}

void print_rows(std::ostream& out, const Run& run, bool all_rows) {
  for (const Result& r : run.results) {
    if (all_rows || r.status == Status::kFail) print_row(out, r);
  }
  if (!run.error.empty()) out << "  " << pad(run.label(), 52) << " FAIL  " << run.error << "\n";
}

void print_summary(std::ostream& out, const Run& run) {
  std::map<std::string, std::map<Status, int>> counts;
  std::vector<std::string> order;  // the suite's categories first, in its order, then "other"
  for (const Result& r : run.results) {
    const std::string name = r.category ? category_name(*r.category) : "other";
    if (!counts.count(name)) order.push_back(name);
    ++counts[name][r.status];
  }
  out << "\nsummary by category (results: pass / fail / not supported):\n";
  for (const std::string& name : order) {
    auto& n = counts[name];
    out << "  " << pad(name, 26) << " " << n[Status::kPass] << " / " << n[Status::kFail] << " / "
        << n[Status::kNotSupported] << "\n";
  }
  if (!run.error.empty()) out << "  did not complete: " << run.error << "\n";
  out << (run.passed() ? "PASS" : "FAIL") << ": " << run.tests() - run.failed_tests() << "/" << run.tests()
      << " checks passed\n";
}

void print_matrix(std::ostream& out, const Report& report) {
  // The categories any run has rows in, in the suite's order (Category's order is the table's).
  std::set<Category> present;
  for (const Run& run : report.runs) {
    for (const Result& r : run.results) {
      if (r.category) present.insert(*r.category);
    }
  }
  size_t width = 12;
  for (const Run& run : report.runs) width = std::max(width, run.label().size());
  out << "\n  " << pad("", width) << " ";
  for (Category c : present) out << pad(category_name(c), std::max<size_t>(8, std::string(category_name(c)).size())) << " ";
  out << "verdict\n";
  for (const Run& run : report.runs) {
    out << "  " << pad(run.label(), width) << " ";
    for (Category c : present) {
      const CategoryVerdict v = category_verdict(run, c);
      const std::string cell = v.state == CategoryState::kNotRun        ? "-"
                               : v.state == CategoryState::kFail        ? "FAIL " + std::to_string(v.failed_tests)
                               : v.state == CategoryState::kNotSupported ? "n/s"
                                                                        : "ok";
      out << pad(cell, std::max<size_t>(8, std::string(category_name(c)).size())) << " ";
    }
    out << (run.error.empty() ? (run.passed() ? "PASS" : "FAIL") : "FAIL (" + run.error + ")") << "\n";
  }
}

// ---- JSON ------------------------------------------------------------------------------------

nlohmann::json to_json(const Result& r) {
  nlohmann::json j = {{"test", r.test},
                      {"category", r.category ? nlohmann::json(category_name(*r.category)) : nlohmann::json()},
                      {"case", r.case_name},
                      {"status", status_name(r.status)},
                      {"metric", r.metric},
                      {"value", number(r.value)},
                      {"bound", number(r.bound)},
                      {"detail", r.detail}};
  if (!std::isnan(r.baseline)) j["baseline"] = number(r.baseline);
  return j;
}

Result result_from_json(const nlohmann::json& j) {
  const char* what = "a result row";
  Result r;
  r.test = field<std::string>(j, "test", what);
  if (j.contains("category") && !j.at("category").is_null()) {
    const std::string name = field<std::string>(j, "category", what);
    r.category = parse_category(name);
    if (!r.category) throw Error("a result row's category '" + name + "' is not one of the suite's");
  }
  r.case_name = optional_text(j, "case");
  const std::string status = field<std::string>(j, "status", what);
  const std::optional<Status> s = parse_status(status);
  if (!s) throw Error("a result row's status '" + status + "' is not pass, fail or not_supported");
  r.status = *s;
  r.metric = optional_text(j, "metric");
  r.value = j.contains("value") ? number_from(j.at("value"), "value") : 0;
  r.bound = j.contains("bound") ? number_from(j.at("bound"), "bound") : 0;
  if (j.contains("baseline")) r.baseline = number_from(j.at("baseline"), "baseline");
  r.detail = optional_text(j, "detail");
  return r;
}

nlohmann::json to_json(const Run& run) {
  nlohmann::json results = nlohmann::json::array();
  for (const Result& r : run.results) results.push_back(to_json(r));
  nlohmann::json j = {{"subject", run.subject},
                      {"device", run.device},
                      {"dtype", run.dtype},
                      {"tests", run.tests()},
                      {"failed_tests", run.failed_tests()},
                      {"passed", run.passed()},
                      {"seconds", run.seconds}};
  if (!run.kind.empty()) j["kind"] = run.kind;
  if (!run.isa.empty()) j["isa"] = run.isa;
  if (!run.error.empty()) j["error"] = run.error;
  if (run.declared) {
    nlohmann::json fails_in = nlohmann::json::array();
    for (Category c : run.declared->fails_in) fails_in.push_back(category_name(c));
    j.update({{"expected", expectation_name(run.declared->expect)},
              {"fails_in", fails_in},
              {"declared", declared_outcome_name(run.declared->outcome)},
              {"as_expected", run.as_declared()},
              {"finding", run.declared->finding}});
  }
  j["results"] = results;
  if (!run.measurements.empty()) {
    nlohmann::json m = nlohmann::json::array();
    for (const Measurement& x : run.measurements) m.push_back({{"name", x.name}, {"value", x.value}, {"detail", x.detail}});
    j["measurements"] = m;
  }
  return j;
}

Run run_from_json(const nlohmann::json& j) {
  const char* what = "a run";
  Run run;
  run.subject = field<std::string>(j, "subject", what);
  run.device = optional_text(j, "device");
  run.dtype = optional_text(j, "dtype");
  run.error = optional_text(j, "error");
  run.kind = optional_text(j, "kind");
  run.isa = optional_text(j, "isa");
  if (j.contains("declared")) {
    Declaration d;
    const std::string expected = field<std::string>(j, "expected", what), outcome = field<std::string>(j, "declared", what);
    bool known = false;
    for (Expectation e : {Expectation::kPass, Expectation::kFail, Expectation::kMayPass}) {
      if (expected == expectation_name(e)) d.expect = e, known = true;
    }
    if (!known) throw Error("a run's field 'expected' is '" + expected + "', not pass, fail or may pass");
    known = false;
    for (DeclaredOutcome o : {DeclaredOutcome::kAsDeclared, DeclaredOutcome::kNotAsDeclared, DeclaredOutcome::kNotRun}) {
      if (outcome == declared_outcome_name(o)) d.outcome = o, known = true;
    }
    if (!known) throw Error("a run's field 'declared' is '" + outcome + "', not as_declared, not_as_declared or not_run");
    for (const std::string& name : field<std::vector<std::string>>(j, "fails_in", what)) {
      const std::optional<Category> c = parse_category(name);
      if (!c) throw Error("a run's field 'fails_in' names '" + name + "', not one of the suite's categories");
      d.fails_in.push_back(*c);
    }
    d.finding = optional_text(j, "finding");
    run.declared = d;
  }
  run.seconds = j.contains("seconds") && j.at("seconds").is_number() ? j.at("seconds").get<double>() : 0;
  const nlohmann::json& results = field<nlohmann::json>(j, "results", what);
  if (!results.is_array()) throw Error("a run's field 'results' is not a list");
  for (const nlohmann::json& row : results) run.results.push_back(result_from_json(row));
  if (j.contains("measurements")) {
    for (const nlohmann::json& m : j.at("measurements")) {
      run.measurements.push_back({field<std::string>(m, "name", "a measurement"), field<double>(m, "value", "a measurement"),
                                  optional_text(m, "detail")});
    }
  }
  return run;
}

nlohmann::json to_json(const Report& report) {
  nlohmann::json runs = nlohmann::json::array();
  for (const Run& run : report.runs) runs.push_back(to_json(run));
  return {{"tool", report.tool}, {"passed", report.passed()}, {"runs", runs}};
}

Report report_from_json(const nlohmann::json& j) {
  Report report;
  report.tool = field<std::string>(j, "tool", "the report");
  const nlohmann::json& runs = field<nlohmann::json>(j, "runs", "the report");
  if (!runs.is_array()) throw Error("the report's field 'runs' is not a list");
  for (const nlohmann::json& run : runs) report.runs.push_back(run_from_json(run));
  return report;
}

Report read_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the report");
  try {
    return report_from_json(nlohmann::json::parse(in));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not JSON: " + e.what());
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write the JSON report");
  out << j.dump(2) << "\n";
  if (!out) throw Error(path + ": cannot write the JSON report");
}

// ---- JUnit -----------------------------------------------------------------------------------

void write_junit(const std::string& path, const Report& report) {
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write the JUnit report");
  int tests = 0, failures = 0;
  for (const Run& run : report.runs) tests += run.tests(), failures += run.failed_tests();
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"" << xml_escape(report.tool) << "\" tests=\""
      << tests << "\" failures=\"" << failures << "\">\n";
  for (const Run& run : report.runs) {
    const auto tests_of_run = by_test(run);
    int skipped = 0;
    for (const auto& [test, rows] : tests_of_run) {
      bool all_not_supported = true;
      for (const Result* r : rows) all_not_supported &= r->status == Status::kNotSupported;
      skipped += all_not_supported;
    }
    out << "  <testsuite name=\"" << xml_escape(run.label()) << "\" tests=\"" << run.tests() << "\" failures=\""
        << run.failed_tests() << "\" skipped=\"" << skipped << "\" time=\"" << run.seconds << "\">\n";
    for (const auto& [test, rows] : tests_of_run) {
      const std::optional<Category> category = rows.front()->category;
      out << "    <testcase classname=\"" << xml_escape(report.tool + (category ? std::string(".") + category_name(*category) : ""))
          << "\" name=\"" << xml_escape(test) << "\"";
      std::string failed, not_supported;
      bool all_not_supported = true;
      for (const Result* r : rows) {
        if (r->status == Status::kFail) failed += (failed.empty() ? "" : "\n") + failure_line(*r);
        all_not_supported &= r->status == Status::kNotSupported;
        if (r->status == Status::kNotSupported && not_supported.empty()) not_supported = r->detail;
      }
      if (!failed.empty()) {
        out << ">\n      <failure message=\"" << xml_escape(failed) << "\"/>\n    </testcase>\n";
      } else if (all_not_supported) {
        out << ">\n      <skipped message=\"" << xml_escape("not supported: " + not_supported) << "\"/>\n    </testcase>\n";
      } else {
        out << "/>\n";
      }
    }
    if (!run.error.empty()) {
      out << "    <testcase classname=\"" << xml_escape(report.tool) << "\" name=\"" << xml_escape(run.label())
          << "\">\n      <failure message=\"" << xml_escape(run.error) << "\"/>\n    </testcase>\n";
    }
    out << "  </testsuite>\n";
  }
  out << "</testsuites>\n";
  if (!out) throw Error(path + ": cannot write the JUnit report");
}

}  // namespace gemma4::conformance
