// gemma4-conform conform: the conformance suite against one backend or many (built in, plugins, or
// one made in Python), in one process, or each run in a child process with --isolate.
#include <unistd.h>

#include <iomanip>
#include <iostream>
#include <regex>
#include <sstream>

#include "conformance/calibration.h"
#include "conformance/isolated.h"
#include "conformance/suite.h"
#include "golden/data_dir.h"
#include "golden/golden_file.h"
#include "impl/plugin_loader.h"
#include "reference/error.h"
#include "reference/files.h"
#include "reference/text.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {
namespace {

using conformance::Run;

// A backend to judge, and how a child `conform` selects it (--isolate): {"--backend", name} or
// {"--backend-lib", path}; empty for a backend made in Python, which lives in this process only.
struct Subject {
  impl::Backend backend;
  std::vector<std::string> select;
};

// --backend NAME (exact), all (every in-tree backend) or REGEX (every in-tree backend it matches).
std::vector<Subject> in_tree_subjects(const std::string& spec) {
  std::vector<Subject> out;
  for (const impl::Backend& b : impl::builtin_backends()) {
    if (b.name == spec) return {{b, {"--backend", b.name}}};
  }
  std::regex pattern;
  try {
    pattern = std::regex(spec == "all" ? ".*" : spec);
  } catch (const std::regex_error&) {
    throw UsageError{"--backend '" + spec + "' is neither a backend (gemma4-conform backends) nor a regular expression"};
  }
  for (const impl::Backend& b : impl::builtin_backends()) {
    if (std::regex_search(b.name, pattern)) out.push_back({b, {"--backend", b.name}});
  }
  if (out.empty()) throw UsageError{"--backend '" + spec + "' matches no backend (gemma4-conform backends lists them)"};
  return out;
}

std::string seconds_text(double s) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(0) << s << " s";
  return out.str();
}

}  // namespace

int conform_command(const std::vector<std::string>& argv, const impl::Backend* given) {
  std::vector<Option> options = {
      {"backend", "NAME|REGEX|all", "in-tree backends: one by name, every one a regex matches, or all (gemma4-conform backends)"},
      {"backend-lib", "PATH[,PATH...]", "out-of-tree backend plugins (.so, impl/plugin_abi.h)"},
      {"device", "LIST", "cpu, cuda or both, comma-separated (default cpu)"},
      {"dtype", "LIST", "f32, bf16, f16, comma-separated (default f32)"},
      {"filter", "REGEX", "run the checks whose '<category>/<name>' matches"},
      {"steps", "N", "memory_flatness training steps (default 50 on CPU, 200 on CUDA)"},
      {"isolate", "", "run each (backend, device, dtype) in a child process: a crash or hang becomes a failing run"},
      {"timeout", "SECONDS", "with --isolate: kill a run after this long (default 1800)"},
      {"report", "FILE.json", "write every result of every run as JSON (conformance/report.h)"},
      {"junit", "FILE.xml", "write a JUnit XML report: a test suite per run, a test case per check"},
      {"golden-dir", "DIR", "the committed goldens (default: golden/ of the data directory)"},
      {"verbose", "", "print every result, not only the failing ones"},
  };
  if (given) {  // the Python package resolved --backend MODULE:FACTORY already
    options.erase(options.begin(), options.begin() + 2);
    options.insert(options.begin(), {"backend", "MODULE:FACTORY", "a Python callable returning gemma4_conform.Backend", true});
  }
  std::string categories;  // from the suite's one table, so the help cannot go stale
  for (const conformance::CategoryInfo& c : conformance::categories()) {
    categories += std::string(categories.empty() ? "" : ", ") + c.name;
  }
  Args args;
  if (!args.parse("conform",
                  "Run the conformance suite, every category in turn:\n  " + categories +
                      ".\nPrints the failing results (check, case, metric, the baseline's error, bound, verdict; every\n"
                      "result with --verbose), a progress line on a terminal, then a summary by category. One backend\n"
                      "in one dtype and device: exit 0 only when nothing failed. Several (--backend REGEX|all, dtype or\n"
                      "device lists): every run in this process, then a backend x category matrix; exit 0 only when\n"
                      "every run's verdict is the one its kind declares (reference, fused and variants pass; each\n"
                      "faulty backend fails in the categories it declares).",
                  options, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  if (!given && !args.has("backend") && !args.has("backend-lib")) throw UsageError{"give --backend or --backend-lib"};
  if (given && args.has("isolate")) {
    throw UsageError{"--isolate runs in-tree backends and plugins in child processes; a backend made in Python lives in "
                     "this process only"};
  }

  std::vector<Subject> subjects;
  if (given) subjects.push_back({*given, {}});
  if (!given && args.has("backend")) subjects = in_tree_subjects(args.get("backend"));
  for (const std::string& path : split_commas(args.get("backend-lib"))) subjects.push_back({impl::load_plugin(path), {"--backend-lib", path}});
  std::vector<torch::Device> devices;
  for (const std::string& d : split_commas(args.get("device", "cpu"))) devices.push_back(parse_device(d));
  std::vector<torch::ScalarType> dtypes;
  for (const std::string& d : split_commas(args.get("dtype", "f32"))) dtypes.push_back(parse_dtype(d));
  if (devices.empty() || dtypes.empty()) throw UsageError{"--device and --dtype need at least one value"};
  conformance::SuiteOptions base;
  base.steps = int_option(args, "steps", 0, 1);  // 0: the category's default
  base.golden_dir = args.get("golden-dir", files::join(golden::data_dir(), "golden"));
  double timeout = 1800;
  try {
    timeout = std::stod(args.get("timeout", "1800"));
  } catch (const std::exception&) {
    timeout = -1;
  }
  if (timeout <= 0) throw UsageError{"--timeout must be a positive number of seconds, got '" + args.get("timeout") + "'"};
  const bool several = subjects.size() * devices.size() * dtypes.size() > 1;

  // The runs: every subject in every device and dtype it supports (a single run is tried anyway,
  // so that each check says "not supported" for itself).
  struct Planned {
    const Subject* subject;
    conformance::SuiteOptions options;
  };
  std::vector<Planned> planned;
  for (const Subject& s : subjects) {
    for (const torch::Device& device : devices) {
      for (torch::ScalarType dtype : dtypes) {
        const std::string why = s.backend.capabilities.unsupported(device, dtype);
        if (several && !why.empty()) {
          std::cout << "skipped: " << s.backend.name << ", " << device << ", " << golden::dtype_name(dtype) << " (" << why << ")\n";
          continue;
        }
        conformance::SuiteOptions o = base;
        o.backend = s.backend, o.device = device, o.dtype = dtype;
        planned.push_back({&s, o});
      }
    }
  }
  if (planned.empty()) throw Error("no backend supports the devices and dtypes asked for");

  conformance::RunOptions run_options;
  run_options.filter = args.get("filter");
  run_options.all_rows = args.has("verbose");
  run_options.progress = ::isatty(STDERR_FILENO) != 0;
  run_options.out = &std::cout;
  conformance::select_checks(planned.front().options, run_options.filter);  // a bad --filter fails before any run

  conformance::Report report{"conform", std::vector<Run>(planned.size())};
  auto announce = [&](size_t i) {
    if (several) std::cout << "[" << i + 1 << "/" << planned.size() << "] " << report.runs[i].label() << "\n";
  };
  auto conclude = [&](size_t i) {
    const Run& run = report.runs[i];
    if (several) {
      std::cout << "    " << (run.passed() ? "PASS" : "FAIL") << ": " << run.tests() - run.failed_tests() << "/"
                << run.tests() << " checks passed" << (run.error.empty() ? "" : " (" + run.error + ")") << ", "
                << seconds_text(run.seconds) << "\n";
    }
  };
  if (!several) {
    const conformance::SuiteOptions& o = planned.front().options;
    std::cout << "gemma4-conform conform: backend " << o.backend.name << ", " << (o.device.is_cuda() ? "cuda" : "cpu")
              << ", " << golden::dtype_name(o.dtype) << "\n";
  } else {
    std::cout << "gemma4-conform conform: " << planned.size() << " runs" << (args.has("isolate") ? ", each in a child process" : ", in this process") << "\n";
  }
  if (args.has("isolate")) {
    std::vector<conformance::IsolatedJob> jobs;
    for (const Planned& p : planned) {
      conformance::IsolatedJob job;
      job.conform_args = p.subject->select;
      job.conform_args.insert(job.conform_args.end(), {"--device", p.options.device.is_cuda() ? "cuda" : "cpu", "--dtype",
                                                       golden::dtype_name(p.options.dtype), "--golden-dir", base.golden_dir});
      for (const char* passed_on : {"filter", "steps"}) {
        if (args.has(passed_on)) job.conform_args.insert(job.conform_args.end(), {std::string("--") + passed_on, args.get(passed_on)});
      }
      job.label.subject = p.options.backend.name;
      job.label.device = p.options.device.is_cuda() ? "cuda" : "cpu";
      job.label.dtype = golden::dtype_name(p.options.dtype);
      jobs.push_back(std::move(job));
    }
    const std::string work_dir = files::make_temp_directory("gemma4_conform_");
    conformance::run_isolated(jobs, 1, timeout, work_dir, [&](size_t i, Run run) {
      report.runs[i] = std::move(run);
      announce(i);
      conformance::print_rows(std::cout, report.runs[i], run_options.all_rows);
      conclude(i);
    });
  } else {
    for (size_t i = 0; i < planned.size(); ++i) {
      report.runs[i].subject = planned[i].options.backend.name;
      report.runs[i].device = planned[i].options.device.is_cuda() ? "cuda" : "cpu";
      report.runs[i].dtype = golden::dtype_name(planned[i].options.dtype);
      announce(i);
      report.runs[i] = conformance::run_suite(planned[i].options, run_options);
      conclude(i);
    }
  }

  int unexpected = 0;
  if (!several) {
    conformance::print_summary(std::cout, report.runs.front());
  } else {
    conformance::print_matrix(std::cout, report);
    std::cout << "\nverdicts against what each backend's kind declares:\n";
    for (size_t i = 0; i < planned.size(); ++i) {
      const impl::Backend& b = planned[i].options.backend;
      const conformance::Expectation expect = conformance::expectation_for(b, planned[i].options.dtype);
      // A faulty backend must fail in each declared category that this run's --filter let run.
      std::vector<impl::Category> declared;
      for (impl::Category c : b.fails_in) {
        for (const conformance::Result& r : report.runs[i].results) {
          if (r.category == c) {
            declared.push_back(c);
            break;
          }
        }
      }
      if (declared.empty()) declared = b.fails_in;
      const conformance::Judgement j = conformance::judge(report.runs[i], declared, expect);
      unexpected += j.as_expected ? 0 : 1;
      std::cout << "  " << text::pad(report.runs[i].label(), 48) << " expected " << conformance::expectation_name(expect)
                << ": " << (j.as_expected ? "ok   " : "WRONG ") << j.finding << "\n";
    }
    std::cout << (unexpected == 0 ? "PASS" : "FAIL") << ": " << planned.size() - unexpected << "/" << planned.size()
              << " runs as their kind declares\n";
  }
  if (args.has("report")) {
    conformance::write_json(args.get("report"), conformance::to_json(report));
    std::cout << "report: " << args.get("report") << " (every result)\n";
  }
  if (args.has("junit")) {
    conformance::write_junit(args.get("junit"), report);
    std::cout << "junit: " << args.get("junit") << "\n";
  }
  if (!args.has("report") && !args.has("verbose")) {
    std::cout << "(failing results only; every result with --verbose, or as JSON with --report FILE.json)\n";
  }
  return several ? (unexpected == 0 ? 0 : 1) : (report.runs.front().passed() ? 0 : 1);
}

}  // namespace gemma4::cli
