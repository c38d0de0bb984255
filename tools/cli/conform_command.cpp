// gemma4-conform conform: the conformance suite against one backend (built in, or a plugin).
#include <unistd.h>

#include <iostream>

#include "conformance/suite.h"
#include "golden/data_dir.h"
#include "golden/golden_file.h"
#include "impl/plugin_loader.h"
#include "reference/files.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {

int conform_command(const std::vector<std::string>& argv, const impl::Backend* given) {
  std::vector<Option> options = {
      {"backend", "NAME", "an in-tree backend (gemma4-conform backends)"},
      {"backend-lib", "PATH", "an out-of-tree backend plugin (.so, impl/plugin_abi.h)"},
      {"device", "cpu|cuda", "device (default cpu)"},
      {"dtype", "f32|bf16|f16", "precision (default f32)"},
      {"filter", "REGEX", "run the checks whose '<category>/<name>' matches"},
      {"steps", "N", "memory_flatness training steps (default 50 on CPU, 200 on CUDA)"},
      {"report", "FILE.json", "write every result (test, category, status, metric, bound) as JSON"},
      {"junit", "FILE.xml", "write a JUnit XML report (GoogleTest's)"},
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
                  "Run the conformance suite against a backend, every category in turn:\n  " + categories +
                      ".\nPrints the failing results (check, case, metric, the baseline's error, bound, verdict; every\n"
                      "result with --verbose), a progress line on a terminal, then a summary by category. Exit 0 only\n"
                      "when nothing failed.",
                  options, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  if (!given && args.has("backend") == args.has("backend-lib")) {
    throw UsageError{"give exactly one of --backend and --backend-lib"};
  }

  conformance::SuiteOptions suite;
  if (given) {
    suite.backend = *given;
  } else {
    suite.backend = args.has("backend") ? impl::find_backend(args.get("backend")) : impl::load_plugin(args.get("backend-lib"));
  }
  suite.device = parse_device(args.get("device", "cpu"));
  suite.dtype = parse_dtype(args.get("dtype", "f32"));
  try {
    suite.steps = std::stoi(args.get("steps", "0"));
  } catch (const std::exception&) {
    throw UsageError{"--steps must be a positive integer, got '" + args.get("steps") + "'"};
  }
  if (suite.steps < 0) throw UsageError{"--steps must be a positive integer, got '" + args.get("steps") + "'"};
  suite.golden_dir = args.get("golden-dir", files::join(golden::data_dir(), "golden"));

  std::cout << "gemma4-conform conform: backend " << suite.backend.name << ", " << args.get("device", "cpu") << ", "
            << args.get("dtype", "f32") << "\n";
  conformance::RunOptions run;
  run.filter = args.get("filter");
  run.junit_path = args.get("junit");
  run.rows = args.has("verbose") ? conformance::RowPrinting::kAll : conformance::RowPrinting::kFailures;
  run.progress = ::isatty(STDERR_FILENO) != 0;
  const conformance::RunReport report = conformance::run_suite(suite, run);
  conformance::print_summary(report, std::cout);
  if (args.has("report")) {
    conformance::write_json_report(report, suite, args.get("report"));
    std::cout << "report: " << args.get("report") << " (every result)\n";
    if (args.has("junit")) std::cout << "junit: " << args.get("junit") << "\n";
  } else if (!args.has("verbose")) {
    std::cout << "(failing results only; every result with --verbose, or as JSON with --report FILE.json)\n";
  }
  return report.passed() ? 0 : 1;
}

}  // namespace gemma4::cli
