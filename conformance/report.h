#pragma once
// The one report of the project: every command that judges something (conform, calibrate, golden
// verify/check, memory report, the Python package's conform-model and --distributed) gives its
// verdicts as rows of this schema, grouped in runs, and writes them through this module: the table
// on the terminal, JSON, and JUnit XML. Python reaches it through gemma4_conform._core.
//
//   Report  = the command's output: a tool name and its runs
//   Run     = one subject (a backend, a model, a golden file, a points file) judged on one device in
//             one dtype, or a run that did not complete (`error`: a crash, a timeout)
//   Result  = one row: a test (the unit JUnit counts, "golden/op/rms_norm-scale"), the case measured
//             inside it, a status, a metric with its value and bound, the baseline's error where
//             there is one (both errors print before the verdict), and a detail.
#include <nlohmann/json.hpp>

#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "impl/category.h"

namespace gemma4::conformance {

using impl::Category;

enum class Status { kPass, kFail, kNotSupported };
const char* status_name(Status status);  // "pass", "fail", "not_supported"
std::optional<Status> parse_status(const std::string& name);

// The suite's categories by name (conformance/categories.cpp holds the one table).
const char* category_name(Category category);
std::optional<Category> parse_category(const std::string& name);

struct Result {
  std::string test;                 // "golden/op/rms_norm-scale": what JUnit counts as a test case
  std::optional<Category> category; // the suite's category; none for rows outside it (a memory point)
  std::string case_name;            // what was measured inside the test ("outputs/y", a parameter name)
  Status status = Status::kPass;
  std::string metric;               // what the value is ("max_abs", "rms", "slope_bytes_per_step", "error")
  double value = 0;
  double bound = 0;
  // The baseline family's error in the same metric (bf16/f16), so that every row shows both errors,
  // the candidate's and the baseline's. NaN when there is none.
  double baseline = std::numeric_limits<double>::quiet_NaN();
  std::string detail;               // cosine/NMSE, an error message, or why not supported
  // How close the value came to its bound: value / bound; without a positive bound (a count, a
  // bitwise comparison) 0 when it passed and infinity when it failed; infinity for NaN.
  double ratio() const;
};

// What a run's backend declares it must do (its kind, impl/backend.h), and whether the run bore it
// out: `conform --expect-declared` and `calibrate` judge runs this way (conformance/verdict.h).
enum class Expectation {
  kPass,     // legitimate (reference, fused, variant): every check passes
  kFail,     // faulty: at least one failing result in each declared category that ran
  kMayPass,  // faulty and below bf16/f16 resolution, run in bf16/f16: reported, not judged
};
const char* expectation_name(Expectation e);  // "pass", "fail", "may pass"
enum class DeclaredOutcome {
  kAsDeclared,
  kNotAsDeclared,
  kNotRun,  // none of the categories the declaration speaks of ran (a --filter left them out)
};
const char* declared_outcome_name(DeclaredOutcome o);  // "as_declared", "not_as_declared", "not_run"
struct Declaration {
  Expectation expect = Expectation::kPass;
  std::vector<Category> fails_in;  // a faulty backend's declared categories
  DeclaredOutcome outcome = DeclaredOutcome::kNotRun;
  std::string finding;             // one line: "pass (81 checks)", "fails in golden (12 results)", "PASSES in decode"
};

// A figure reported beside a run's verdict and never judged: a quantized subject's envelope
// against the float model (golden/FORMAT.md, "Quantized subjects"), "envelope/beyond_window/kld_mean".
struct Measurement {
  std::string name;
  double value = 0;
  std::string detail;  // what it is measured against, and over how many positions
};

struct Run {
  std::string subject;  // the backend, model or file judged
  std::string device;   // "cpu", "cuda", ... ("" where it does not apply)
  std::string dtype;    // "f32", "bf16", "f16" ("" where it does not apply)
  std::string kind;     // the backend's kind ("reference", "faulty", ...); "" where it does not apply
  std::string isa;      // the CPU ISA level the run was held to ("native", "AVX2"); "" where it does not apply
  std::optional<Declaration> declared;  // set when the run was judged against its backend's declaration
  std::vector<Result> results;
  std::vector<Measurement> measurements;  // reported, not judged
  std::string error;    // set when the run did not complete (crash, timeout, no report): why
  double seconds = 0;
  // Derived from the rows: a test fails when any of its rows fails; a run that did not complete fails.
  int tests() const;
  int failed_tests() const;
  bool passed() const { return error.empty() && failed_tests() == 0 && tests() > 0; }
  bool failed_in(Category category) const;  // any failing row of that category
  // Judged against its declaration, and it behaved as declared (not "not run", not "not as declared").
  bool as_declared() const { return declared && declared->outcome == DeclaredOutcome::kAsDeclared; }
  std::string label() const;                // "subject, device, dtype[ @isa]" without the empty parts
};

struct Report {
  std::string tool;  // "conform", "calibrate", "golden verify", "conform-model", ...
  std::vector<Run> runs;
  bool passed() const;  // every run passed
};

// ---- the table -------------------------------------------------------------------------------
// One row as the terminal shows it: test, case, metric=value, baseline=..., bound=..., verdict and
// detail (ggml's test-backend-ops columns; both errors before the verdict, as FlashAttention's tests).
void print_row(std::ostream& out, const Result& row);
// A run's rows: the failing ones, or all (`all_rows`).
void print_rows(std::ostream& out, const Run& run, bool all_rows);
// Per category (rows without one under "other"): pass / fail / not supported, then PASS or FAIL.
void print_summary(std::ostream& out, const Run& run);
// Several runs side by side: one line per run, a column per category: "ok", "FAIL n" (failing
// tests), "n/s" (everything not supported), "-" (not run), then the run's verdict.
void print_matrix(std::ostream& out, const Report& report);

// ---- JSON and JUnit --------------------------------------------------------------------------
// A row: {"test", "category" (name or null), "case", "status", "metric", "value" (null for NaN),
// "bound", "baseline" (only where there is one), "detail"}.
nlohmann::json to_json(const Result& row);
Result result_from_json(const nlohmann::json& j);  // throws gemma4::Error naming the missing or bad field
// A run: {"subject", "device", "dtype", "kind"?, "isa"?, "tests", "failed_tests", "passed", "seconds",
// "error"?, and when judged against its declaration "expected", "fails_in", "declared", "as_expected",
// "finding"; then "results", and "measurements" [{"name", "value", "detail"}] when there are any}.
nlohmann::json to_json(const Run& run);
Run run_from_json(const nlohmann::json& j);
// A report: {"tool", "passed", "runs"}.
nlohmann::json to_json(const Report& report);
Report report_from_json(const nlohmann::json& j);
// Reads a report file; throws gemma4::Error naming the file and the field when it is not one.
Report read_report(const std::string& path);
void write_json(const std::string& path, const nlohmann::json& j);  // throws naming `path`

// The one JUnit writer: a <testsuite> per run (named by its label), a <testcase> per test
// (classname "<tool>.<category>"), failing rows as one <failure> whose message lists them, a test
// whose rows are all "not supported" as <skipped>, a run that did not complete as one failed case.
void write_junit(const std::string& path, const Report& report);

}  // namespace gemma4::conformance
