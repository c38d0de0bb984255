// gemma4-conform calibrate: every legitimate implementation must pass the whole suite and every
// faulty backend must fail where it says, in each dtype and at each CPU ISA level asked for; then
// the separation table, per dtype and category, of how close correct code came to the bounds and
// how far the weakest bug went past them. The engine (conformance/engine.h) plans, runs and judges;
// --isolate, and any ISA level but the native one, run each in a child process.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "conformance/calibration.h"
#include "conformance/check.h"
#include "conformance/engine.h"
#include "reference/error.h"
#include "reference/text.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {

using namespace conformance;

namespace {

// A column: `s` padded to `width`, then one space.
std::string column(const std::string& s, size_t width) { return text::pad(s, width) + " "; }

std::string ratio_text(double r) {
  if (std::isinf(r)) return "inf";
  std::ostringstream s;
  s << std::setprecision(3) << r;
  return s.str();
}

void print_separation(const std::vector<Separation>& table) {
  std::cout << "\nseparation (ratio = error / bound; legitimate must stay <= 1, every faulty backend must exceed 1):\n  "
            << column("dtype", 5) << column("category", 24) << column("worst legitimate", 17) << column("weakest faulty", 15)
            << "where / who\n";
  for (const Separation& s : table) {
    std::cout << "  " << column(s.dtype, 5) << column(category_name(s.category), 24)
              << column(ratio_text(s.worst_legitimate), 17)
              << column(s.faulty_backends ? ratio_text(s.weakest_faulty) : "-", 15) << (s.separated() ? "" : "NOT SEPARATED  ")
              << (s.worst_legitimate > 0 ? s.worst_legitimate_at : "-") << " / " << (s.faulty_backends ? s.weakest_faulty_by : "-")
              << "\n";
  }
}

}  // namespace

int calibrate_command(const std::vector<std::string>& argv, const Invocation& invocation) {
  const std::vector<Option> options = {
      {"device", "cpu|cuda", "device (default cpu)"},
      {"dtype", "LIST|all", "dtypes, comma-separated (default all: f32,bf16,f16)"},
      {"isa", "native|auto|LIST", "CPU ISA levels: native (default), auto (every level this CPU offers) or names "
                                  "(AVX2, AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16, AVX10_1_512, ...); "
                                  "a level but native runs in child processes"},
      {"backends", "REGEX", "only the in-tree backends whose name matches"},
      {"categories", "LIST", "only these categories, comma-separated (default: all); a faulty backend whose bug "
                             "shows only elsewhere is left out"},
      {"skip-categories", "LIST", "all categories but these, comma-separated (CTest's calibrate skips real_size, "
                                  "which its own test runs)"},
      {"backend-lib", "PATH[,PATH...]", "also out-of-tree plugins, held to the kind they declare (variant or faulty)"},
      {"expect-declared", "", "judge every run against its backend's declaration: what calibrate always does"},
      {"isolate", "", "run each run in a child process (a crash or hang becomes a failed run)"},
      {"jobs", "N", "child processes at a time (--isolate, ISA levels; default: the number of cores)"},
      {"timeout", "SECONDS", "kill a child process after this long (default 1800)"},
      {"steps", "N", "memory_flatness training steps (default 50 on CPU, 200 on CUDA), as conform --steps"},
      {"work-dir", "DIR", "where child processes' reports and logs go (default a new temporary directory)"},
      {"report", "FILE.json", "write every run, the separation table and each faulty backend's strength as JSON"},
      {"junit", "FILE.xml", "write a JUnit XML report, one test case per run"},
  };
  Args args;
  if (!args.parse("calibrate",
                  "Run the conformance suite over every legitimate implementation (reference, cuda, variant-*: each must\n"
                  "pass everything) and every faulty backend (each must fail in the categories it declares; one whose\n"
                  "bug is below bf16/f16 resolution must fail in f32), in each dtype and at each CPU ISA level asked\n"
                  "for, in this process; print one line per run and the separation table: per dtype and category, the\n"
                  "worst ratio of error to bound among legitimate results and the weakest faulty backend's largest\n"
                  "ratio. Exit 1 when any run is not as declared.",
                  options, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  if (split_commas(args.get("device", "cpu")).size() != 1) throw UsageError{"--device takes one device"};
  EngineOptions o = engine_options(args, invocation, "all", static_cast<int>(std::thread::hardware_concurrency()));
  o.subjects = calibration_subjects(args.get("backends"));
  for (const std::string& path : split_commas(args.get("backend-lib"))) {
    Subject plugin = plugin_subject(path);
    if (plugin.backend.kind != impl::BackendKind::kVariant && plugin.backend.kind != impl::BackendKind::kFaulty) {
      throw Error(path + ": plugin '" + plugin.backend.name + "' declares kind '" +
                  impl::backend_kind_name(plugin.backend.kind) + "'; calibrate needs a variant or a faulty backend");
    }
    o.subjects.push_back(std::move(plugin));
  }
  if (o.subjects.empty()) throw Error("no backend matches --backends '" + args.get("backends") + "'");
  o.categories = category_list(args, "categories");
  const std::vector<Category> skipped = category_list(args, "skip-categories");
  if (o.categories.empty()) {
    for (const CategoryInfo& c : categories()) o.categories.push_back(c.category);
  }
  o.categories.erase(std::remove_if(o.categories.begin(), o.categories.end(),
                                    [&](Category c) { return std::count(skipped.begin(), skipped.end(), c) > 0; }),
                     o.categories.end());
  if (o.categories.empty()) throw UsageError{"--categories and --skip-categories leave no category"};
  o.declared_categories_only = true;
  o.skip_unsupported = true;
  o.expect_declared = true;
  o.work_dir = args.get("work-dir");

  size_t finished = 0;
  int unexpected = 0;
  EngineObserver observer;
  observer.planned = [&](const std::vector<Run>& runs, const std::vector<std::string>&, bool) {
    size_t children = 0;
    for (const Run& r : runs) children += o.isolate || r.isa != "native";
    std::cout << "gemma4-conform calibrate: " << runs.size() << " runs on " << args.get("device", "cpu") << ", "
              << runs.size() - children << " in this process, " << children << " in child processes\n";
  };
  observer.finished = [&](size_t, size_t total, const Run& r) {
    const bool ok = r.as_declared();
    unexpected += ok ? 0 : 1;
    std::cout << "  [" << ++finished << "/" << total << "] " << column(r.subject, 44) << column(r.dtype, 4)
              << column(r.isa, 16) << column("expect " + std::string(expectation_name(r.declared->expect)), 15)
              << (ok ? "ok   " : "WRONG ") << r.declared->finding << " (" << std::fixed << std::setprecision(1)
              << r.seconds << " s)\n"
              << std::defaultfloat << std::flush;
  };
  EngineResult result = run_engine(o, observer);
  result.report.tool = "calibrate";
  if (!result.work_dir.empty()) std::cout << "  child processes' reports and logs: " << result.work_dir << "\n";

  const std::vector<Separation> table = separation_table(result.report);
  const std::vector<FaultyStrength> strengths = faulty_strengths(result.report);
  print_separation(table);
  if (args.has("report")) write_json(args.get("report"), calibration_json(result.report, table, strengths));
  if (args.has("junit")) write_junit(args.get("junit"), calibration_summary(result.report));
  const size_t runs = result.report.runs.size();
  std::cout << (unexpected == 0 ? "PASS" : "FAIL") << ": " << runs - unexpected << "/" << runs << " runs as expected\n";
  return unexpected == 0 ? 0 : 1;
}

}  // namespace gemma4::cli
