// gemma4-conform conform: the conformance suite against one backend or many (built in, plugins, or
// one made in Python): parse the options, run the engine (conformance/engine.h), print, exit.
#include <unistd.h>

#include <iomanip>
#include <iostream>
#include <sstream>

#include "conformance/engine.h"
#include "conformance/suite.h"
#include "reference/error.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {

int conform_command(const std::vector<std::string>& argv, const Invocation& invocation,
                    const conformance::Subject* given) {
  std::vector<Option> options = {
      {"backend", "NAME|REGEX|all", "in-tree backends: one by name, every one a regex matches, or all (gemma4-conform backends)"},
      {"backend-lib", "PATH[,PATH...]", "out-of-tree backend plugins (.so, impl/plugin_abi.h)"},
      {"device", "LIST", "cpu, cuda or both, comma-separated (default cpu)"},
      {"dtype", "LIST", "f32, bf16, f16, comma-separated (default f32)"},
      {"isa", "native|auto|LIST", "CPU ISA levels (calibrate --help lists them); a level but native runs in a child process"},
      {"filter", "REGEX", "run the checks whose '<category>/<name>' matches"},
      {"steps", "N", "memory_flatness training steps (default 50 on CPU, 200 on CUDA)"},
      {"expect-declared", "", "judge each run against what its backend's kind declares (reference, fused and variants "
                              "pass; a faulty backend fails in each declared category that ran); categories left out "
                              "are 'not run'"},
      {"isolate", "", "run each (backend, device, dtype) in a child process: a crash or hang becomes a failing run"},
      {"jobs", "N", "child processes at a time (default 1)"},
      {"timeout", "SECONDS", "kill a child process after this long (default 1800)"},
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
                      "result with --verbose), a progress line on a terminal, then a summary by category (several\n"
                      "runs: a backend x category matrix). Exit 0 only when every run passed every check that ran.\n"
                      "With --expect-declared: exit 0 only when every run behaved as its backend's kind declares.",
                  options, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  if (!given && !args.has("backend") && !args.has("backend-lib")) throw UsageError{"give --backend or --backend-lib"};

  conformance::EngineOptions o = engine_options(args, invocation);
  if (given) o.subjects.push_back(*given);
  if (!given && args.has("backend")) {
    try {
      o.subjects = conformance::in_tree_subjects(args.get("backend"));
    } catch (const Error& e) {
      throw UsageError{e.what()};  // a name or regex that selects nothing is a usage error
    }
  }
  for (const std::string& path : split_commas(args.get("backend-lib"))) o.subjects.push_back(conformance::plugin_subject(path));
  o.filter = args.get("filter");
  o.golden_dir = args.get("golden-dir");
  o.expect_declared = args.has("expect-declared");
  o.rows_out = &std::cout;
  o.all_rows = args.has("verbose");
  o.progress = ::isatty(STDERR_FILENO) != 0;

  conformance::EngineObserver observer;
  observer.planned = [&](const std::vector<conformance::Run>& runs, const std::vector<std::string>& skipped, bool children) {
    for (const std::string& s : skipped) std::cout << "skipped: " << s << "\n";
    if (runs.size() == 1) {
      std::cout << "gemma4-conform conform: backend " << runs.front().label() << (children ? ", in a child process" : "") << "\n";
    } else {
      std::cout << "gemma4-conform conform: " << runs.size() << " runs" << (children ? ", in child processes" : ", in this process") << "\n";
    }
  };
  observer.started = [&](size_t i, size_t total, const conformance::Run& run) {
    if (total > 1) std::cout << "[" << i + 1 << "/" << total << "] " << run.label() << "\n";
  };
  observer.finished = [&](size_t, size_t total, const conformance::Run& run) {
    if (total == 1) return;
    std::cout << "    " << (run.passed() ? "PASS" : "FAIL") << ": " << run.tests() - run.failed_tests() << "/"
              << run.tests() << " checks passed" << (run.error.empty() ? "" : " (" + run.error + ")") << ", "
              << std::fixed << std::setprecision(0) << run.seconds << " s\n"
              << std::defaultfloat;
  };
  const conformance::EngineResult result = conformance::run_engine(o, observer);
  conformance::print_conclusion(std::cout, result.report, o.expect_declared);
  if (args.has("report")) {
    conformance::write_json(args.get("report"), conformance::to_json(result.report));
    std::cout << "report: " << args.get("report") << " (every result)\n";
  }
  if (args.has("junit")) {
    conformance::write_junit(args.get("junit"), result.report);
    std::cout << "junit: " << args.get("junit") << "\n";
  }
  if (!args.has("report") && !args.has("verbose")) {
    std::cout << "(failing results only; every result with --verbose, or as JSON with --report FILE.json)\n";
  }
  return conformance::exit_code(result.report, o.expect_declared);
}

}  // namespace gemma4::cli
