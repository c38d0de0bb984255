#include "conformance/engine.h"

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <set>
#include <thread>

#include "conformance/isolated.h"
#include "conformance/suite.h"
#include "conformance/verdict.h"
#include "golden/data_dir.h"
#include "golden/golden_file.h"
#include "impl/plugin_loader.h"
#include "reference/error.h"
#include "reference/files.h"
#include "reference/text.h"

namespace gemma4::conformance {
namespace {

// A run to make: its subject, the suite's options, the ISA level, and the checks it runs.
struct Planned {
  const Subject* subject;
  SuiteOptions options;
  IsaLevel isa;
  std::string filter;  // "" runs every check
};

std::string device_name(const torch::Device& d) { return d.is_cuda() ? "cuda" : "cpu"; }

// A regex (ECMAScript search) that matches where both match; "" matches everything.
std::string both(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return a.empty() ? b : a;
  return "^(?=.*(?:" + a + "))(?=.*(?:" + b + "))";
}

// The filter that runs exactly `categories`: "" when they are every category.
std::string categories_filter(const std::vector<Category>& selected) {
  if (selected.size() == categories().size()) return "";
  std::string names;
  for (Category c : selected) names += (names.empty() ? "" : "|") + std::string(category_name(c));
  return "^(" + names + ")/";
}

// The run as planned, before it ran: its label, and what a child that leaves no report is.
Run planned_run(const Planned& p) {
  Run run;
  run.subject = p.options.backend.name;
  run.device = device_name(p.options.device);
  run.dtype = golden::dtype_name(p.options.dtype);
  run.kind = impl::backend_kind_name(p.options.backend.kind);
  run.isa = p.isa.name;
  return run;
}

std::vector<Planned> plan(const EngineOptions& o, std::vector<std::string>& skipped) {
  std::vector<Category> selected = o.categories;
  if (selected.empty()) {
    for (const CategoryInfo& c : categories()) selected.push_back(c.category);
  }
  const size_t combinations = o.subjects.size() * o.devices.size() * o.dtypes.size() * o.isas.size();
  std::vector<Planned> out;
  for (const Subject& s : o.subjects) {
    const impl::Backend& b = s.backend;
    for (const torch::Device& device : o.devices) {
      for (torch::ScalarType dtype : o.dtypes) {
        for (const IsaLevel& isa : o.isas) {
          if (device.is_cuda() && !isa.native()) continue;  // the ISA levels are the CPU's
          const std::string why = b.capabilities.unsupported(device, dtype);
          if (!why.empty() && (o.skip_unsupported || combinations > 1)) {
            skipped.push_back(b.name + ", " + device_name(device) + ", " + golden::dtype_name(dtype) + " (" + why + ")");
            continue;
          }
          std::vector<Category> run_categories = selected;
          if (o.declared_categories_only && b.kind == impl::BackendKind::kFaulty) {
            run_categories.clear();
            for (Category c : b.fails_in) {
              if (std::count(selected.begin(), selected.end(), c)) run_categories.push_back(c);
            }
            if (run_categories.empty()) continue;  // its bug shows only in categories not asked for
          }
          Planned p{&s, {}, isa, both(categories_filter(run_categories), o.filter)};
          p.options.backend = b, p.options.device = device, p.options.dtype = dtype, p.options.steps = o.steps;
          p.options.golden_dir = o.golden_dir.empty() ? files::join(golden::data_dir(), "golden") : o.golden_dir;
          out.push_back(std::move(p));
        }
      }
    }
  }
  return out;
}

// The child's command line: the worker, "conform", how it selects the subject, and the run's options.
std::vector<std::string> child_command(const EngineOptions& o, const Planned& p) {
  if (o.worker.empty()) throw Error("no worker to run '" + p.options.backend.name + "' in a child process");
  if (p.subject->select.empty()) {
    throw Error("'" + p.options.backend.name + "' lives in this process only (a backend object made in Python): "
                "give its MODULE:FACTORY to run it in a child process");
  }
  std::vector<std::string> c = o.worker;
  c.push_back("conform");
  c.insert(c.end(), p.subject->select.begin(), p.subject->select.end());
  c.insert(c.end(), {"--device", device_name(p.options.device), "--dtype", golden::dtype_name(p.options.dtype),
                     "--golden-dir", p.options.golden_dir});
  if (!p.filter.empty()) c.insert(c.end(), {"--filter", p.filter});
  if (p.options.steps > 0) c.insert(c.end(), {"--steps", std::to_string(p.options.steps)});
  return c;
}

}  // namespace

std::vector<Subject> in_tree_subjects(const std::string& spec) {
  for (const impl::Backend& b : impl::builtin_backends()) {
    if (b.name == spec) return {{b, {"--backend", b.name}}};
  }
  std::regex pattern;
  try {
    pattern = std::regex(spec == "all" ? ".*" : spec);
  } catch (const std::regex_error&) {
    throw Error("--backend '" + spec + "' is neither a backend (gemma4-conform backends) nor a regular expression");
  }
  std::vector<Subject> out;
  for (const impl::Backend& b : impl::builtin_backends()) {
    if (std::regex_search(b.name, pattern)) out.push_back({b, {"--backend", b.name}});
  }
  if (out.empty()) throw Error("--backend '" + spec + "' matches no backend (gemma4-conform backends lists them)");
  return out;
}

std::vector<Subject> calibration_subjects(const std::string& filter_text) {
  const std::regex filter = option_regex("backends", filter_text);
  std::vector<Subject> out;
  for (const impl::Backend& b : impl::builtin_backends()) {
    if (!is_legitimate(b) && b.kind != impl::BackendKind::kFaulty) continue;
    if (std::regex_search(b.name, filter)) out.push_back({b, {"--backend", b.name}});
  }
  return out;
}

Subject plugin_subject(const std::string& path) { return {impl::load_plugin(path), {"--backend-lib", path}}; }

EngineResult run_engine(const EngineOptions& o, const EngineObserver& observer) {
  if (o.subjects.empty()) throw Error("no backend to judge");
  if (o.devices.empty() || o.dtypes.empty() || o.isas.empty()) throw Error("no device, dtype or ISA level to run in");
  EngineResult result;
  const std::vector<Planned> planned = plan(o, result.skipped);
  if (planned.empty()) throw Error("no backend supports the devices and dtypes asked for");
  select_checks(planned.front().options, o.filter);  // a bad --filter fails before any run
  if (observer.planned) {
    std::vector<Run> runs;
    bool in_children = false;
    for (const Planned& p : planned) runs.push_back(planned_run(p)), in_children |= o.isolate || !p.isa.native();
    observer.planned(runs, result.skipped, in_children);
  }

  result.report.tool = "conform";
  result.report.runs.resize(planned.size());
  const size_t total = planned.size();
  auto finish = [&](size_t i, Run run) {
    const Planned& p = planned[i];
    run.kind = impl::backend_kind_name(p.options.backend.kind);
    run.isa = p.isa.name;
    if (o.expect_declared) run.declared = judge_declared(run, p.options.backend, p.options.dtype);
    result.report.runs[i] = std::move(run);
    if (observer.finished) observer.finished(i, total, result.report.runs[i]);
  };

  std::vector<size_t> children;
  for (size_t i = 0; i < total; ++i) {
    if (o.isolate || !planned[i].isa.native()) {
      children.push_back(i);
      continue;
    }
    if (observer.started) observer.started(i, total, planned_run(planned[i]));
    RunOptions run_options;
    run_options.filter = planned[i].filter;
    run_options.all_rows = o.all_rows;
    run_options.progress = o.progress;
    run_options.out = o.rows_out;
    finish(i, run_suite(planned[i].options, run_options));
  }
  if (children.empty()) return result;

  result.work_dir = o.work_dir.empty() ? files::make_temp_directory("gemma4_conform_") : o.work_dir;
  files::make_directories(result.work_dir);
  // Children side by side share the cores: each gets its share of threads unless told otherwise.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<IsolatedJob> jobs;
  for (size_t i : children) {
    IsolatedJob job;
    job.command = child_command(o, planned[i]);
    job.env = o.child_env;
    job.env.insert(planned[i].isa.env.begin(), planned[i].isa.env.end());
    if (!std::getenv("OMP_NUM_THREADS") && !job.env.count("OMP_NUM_THREADS")) {
      job.env.emplace("OMP_NUM_THREADS", std::to_string(std::max(1, cores / std::max(1, o.jobs))));
    }
    job.label = planned_run(planned[i]);
    jobs.push_back(std::move(job));
  }
  run_isolated(jobs, o.jobs, o.timeout, result.work_dir, [&](size_t k, Run run) {
    const size_t i = children[k];
    if (observer.started) observer.started(i, total, planned_run(planned[i]));
    if (o.rows_out) print_rows(*o.rows_out, run, o.all_rows);
    finish(i, std::move(run));
  });
  return result;
}

void print_conclusion(std::ostream& out, const Report& report, bool expect_declared) {
  if (report.runs.size() == 1) {
    print_summary(out, report.runs.front());
  } else {
    print_matrix(out, report);
    int passed = 0;
    for (const Run& run : report.runs) passed += run.passed();
    out << (passed == static_cast<int>(report.runs.size()) ? "PASS" : "FAIL") << ": " << passed << "/"
        << report.runs.size() << " runs passed every check that ran\n";
  }
  if (!expect_declared) return;
  out << "\nagainst what each backend declares (judged in the categories that ran):\n";
  size_t width = 24;
  for (const Run& run : report.runs) width = std::max(width, run.label().size());
  int judged = 0, wrong = 0, not_run = 0;
  std::set<Category> ran;
  for (const Run& run : report.runs) {
    for (Category c : categories_run(run)) ran.insert(c);
    if (!run.declared) continue;
    const DeclaredOutcome outcome = run.declared->outcome;
    const char* mark = outcome == DeclaredOutcome::kAsDeclared ? "ok      "
                       : outcome == DeclaredOutcome::kNotRun   ? "not run "
                                                               : "WRONG   ";
    out << "  " << text::pad(run.label(), width) << " expected " << text::pad(expectation_name(run.declared->expect), 8) << " "
        << mark << run.declared->finding << "\n";
    judged += outcome != DeclaredOutcome::kNotRun;
    wrong += outcome == DeclaredOutcome::kNotAsDeclared;
    not_run += outcome == DeclaredOutcome::kNotRun;
  }
  std::string ran_names, left_out;
  for (const CategoryInfo& c : categories()) {
    std::string& list = ran.count(c.category) ? ran_names : left_out;
    list += (list.empty() ? "" : ", ") + std::string(c.name);
  }
  out << (wrong == 0 && judged > 0 ? "PASS" : "FAIL") << ": " << judged - wrong << "/" << judged
      << " judged runs as declared in " << (ran_names.empty() ? "no category" : ran_names);
  if (not_run > 0) out << "; " << not_run << " runs not judged (nothing their declarations speak of ran)";
  out << "\n";
  if (!left_out.empty()) out << "not run: " << left_out << "\n";
}

int exit_code(const Report& report, bool expect_declared) {
  if (!expect_declared) return report.passed() ? 0 : 1;
  int judged = 0;
  for (const Run& run : report.runs) {
    if (!run.declared || run.declared->outcome == DeclaredOutcome::kNotAsDeclared) return 1;
    judged += run.as_declared();
  }
  return judged > 0 ? 0 : 1;
}

}  // namespace gemma4::conformance
