// gemma4-conform calibrate: every legitimate implementation must pass the whole suite and every
// faulty backend must fail where it says, in each dtype and at each CPU ISA level asked for; then
// the separation table, per dtype and category, of how close correct code came to the bounds and
// how far the weakest bug went past them.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "reference/error.h"
#include "reference/files.h"
#include "impl/plugin_loader.h"
#include "tools/cli/args.h"
#include "tools/cli/calibration.h"
#include "tools/cli/commands.h"
#include "tools/cli/markup.h"

namespace gemma4::cli {
namespace {

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s + " ";
}

std::string ratio_text(double r) {
  if (std::isinf(r)) return "inf";
  std::ostringstream s;
  s << std::setprecision(3) << r;
  return s.str();
}

void write_junit(const std::vector<CalibrationRun>& runs, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write the JUnit report");
  int failures = 0;
  for (const CalibrationRun& r : runs) failures += r.as_expected ? 0 : 1;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites tests=\"" << runs.size() << "\" failures=\"" << failures
      << "\">\n  <testsuite name=\"calibrate\" tests=\"" << runs.size() << "\" failures=\"" << failures << "\">\n";
  for (const CalibrationRun& r : runs) {
    out << "    <testcase classname=\"calibrate." << impl::backend_kind_name(r.backend->kind) << "\" name=\""
        << xml_escape(r.backend->name + "." + r.dtype + "." + r.isa.name) << "\" time=\"" << r.child.seconds << "\">";
    if (!r.as_expected) {
      out << "<failure message=\"" << xml_escape("expected " + std::string(expectation_name(r.expect)) + ": " + r.finding)
          << "\"/>";
    }
    out << "</testcase>\n";
  }
  out << "  </testsuite>\n</testsuites>\n";
}

void print_separation(const std::vector<Separation>& table) {
  std::cout << "\nseparation (ratio = error / bound; legitimate must stay <= 1, every faulty backend must exceed 1):\n  "
            << pad("dtype", 5) << pad("category", 24) << pad("worst legitimate", 17) << pad("weakest faulty", 15)
            << "where / who\n";
  for (const Separation& s : table) {
    std::cout << "  " << pad(s.dtype, 5) << pad(conformance::category_name(s.category), 24)
              << pad(ratio_text(s.worst_legitimate), 17)
              << pad(s.faulty_backends ? ratio_text(s.weakest_faulty) : "-", 15) << (s.separated() ? "" : "NOT SEPARATED  ")
              << (s.worst_legitimate > 0 ? s.worst_legitimate_at : "-") << " / " << (s.faulty_backends ? s.weakest_faulty_by : "-")
              << "\n";
  }
}

}  // namespace

int calibrate_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      {"device", "cpu|cuda", "device (default cpu)"},
      {"dtype", "LIST|all", "dtypes, comma-separated (default all: f32,bf16,f16)"},
      {"isa", "native|auto|LIST", "CPU ISA levels: native (default), auto (every level this CPU offers) or names "
                                  "(AVX2, AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16, AVX10_1_512, ...)"},
      {"backends", "REGEX", "only the in-tree backends whose name matches"},
      {"backend-lib", "PATH[,PATH...]", "also out-of-tree plugins, held to the kind they declare (variant or faulty)"},
      {"jobs", "N", "runs at a time (default: the number of cores)"},
      {"timeout", "SECONDS", "kill a run after this long (default 1800)"},
      {"work-dir", "DIR", "where each run's report and log go (default a new temporary directory)"},
      {"report", "FILE.json", "write every run, the separation table and each faulty backend's strength as JSON"},
      {"junit", "FILE.xml", "write a JUnit XML report, one test case per run"},
  };
  Args args;
  if (!args.parse("calibrate",
                  "Run the conformance suite over every legitimate implementation (reference, cuda, variant-*: each must\n"
                  "pass everything) and every faulty backend (each must fail in the categories it declares; one whose\n"
                  "bug is below bf16/f16 resolution must fail in f32), in each dtype and at each CPU ISA level asked\n"
                  "for; print one line per run and the separation table: per dtype and category, the worst ratio of\n"
                  "error to bound among legitimate results and the weakest faulty backend's largest ratio. Exit 1 when\n"
                  "any run is not as expected.",
                  options, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  std::vector<std::string> dtypes;
  {
    const std::string list = args.get("dtype", "all");
    std::istringstream in(list == "all" ? "f32,bf16,f16" : list);
    for (std::string d; std::getline(in, d, ',');) {
      parse_dtype(d);  // validates
      dtypes.push_back(d);
    }
  }
  const std::string device = args.get("device", "cpu");
  parse_device(device);
  const std::vector<IsaLevel> isas = parse_isa_levels(args.get("isa", "native"));
  int jobs = static_cast<int>(std::thread::hardware_concurrency());
  double timeout = 1800;
  try {
    if (args.has("jobs")) jobs = std::stoi(args.get("jobs"));
    if (args.has("timeout")) timeout = std::stod(args.get("timeout"));
  } catch (const std::exception&) {
    throw UsageError{"--jobs and --timeout take numbers"};
  }
  if (jobs < 1 || timeout <= 0) throw UsageError{"--jobs and --timeout must be positive"};
  const std::string work_dir = args.has("work-dir") ? args.get("work-dir") : files::make_temp_directory("gemma4_calibrate_");
  files::make_directories(work_dir);

  std::vector<Subject> subjects = builtin_subjects(args.get("backends"));
  static std::vector<impl::Backend> plugins;  // the subjects point into it for the whole run
  {
    std::istringstream in(args.get("backend-lib"));
    std::vector<std::string> paths;
    for (std::string path; std::getline(in, path, ',');) {
      if (!path.empty()) paths.push_back(path);
    }
    plugins.reserve(paths.size());
    for (const std::string& path : paths) {
      plugins.push_back(impl::load_plugin(path));
      if (plugins.back().kind != impl::BackendKind::kVariant && plugins.back().kind != impl::BackendKind::kFaulty) {
        throw Error(path + ": plugin '" + plugins.back().name + "' declares kind '" +
                    impl::backend_kind_name(plugins.back().kind) + "'; calibrate needs a variant or a faulty backend");
      }
      subjects.push_back({&plugins.back(), {"--backend-lib", path}});
    }
  }
  if (subjects.empty()) throw Error("no backend matches --backends '" + args.get("backends") + "'");
  std::vector<CalibrationRun> runs = plan_runs(subjects, dtypes, isas, device, work_dir);
  std::cout << "gemma4-conform calibrate: " << runs.size() << " runs on " << device << " (" << jobs
            << " at a time), reports in " << work_dir << "\n";
  // Runs side by side share the cores: each gets its share of threads unless told otherwise.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<ChildJob> child_jobs;
  for (CalibrationRun& r : runs) {
    if (!std::getenv("OMP_NUM_THREADS")) r.job.env.emplace("OMP_NUM_THREADS", std::to_string(std::max(1, cores / jobs)));
    child_jobs.push_back(r.job);
  }
  size_t finished = 0;
  int unexpected = 0;
  run_children(child_jobs, jobs, timeout, [&](size_t i, const ChildResult& result) {
    CalibrationRun& r = runs[i];
    r.child = result;
    judge_run(r);
    unexpected += r.as_expected ? 0 : 1;
    std::cout << "  [" << ++finished << "/" << runs.size() << "] " << pad(r.backend->name, 44) << pad(r.dtype, 4)
              << pad(r.isa.name, 16) << pad("expect " + std::string(expectation_name(r.expect)), 15)
              << (r.as_expected ? "ok   " : "WRONG ") << r.finding << " (" << std::fixed << std::setprecision(0)
              << r.child.seconds << " s)\n"
              << std::defaultfloat << std::flush;
  });

  const std::vector<Separation> table = separation_table(runs);
  const std::vector<FaultyStrength> strengths = faulty_strengths(runs);
  print_separation(table);
  if (args.has("report")) {
    std::ofstream out(args.get("report"));
    if (!out) throw Error(args.get("report") + ": cannot write the JSON report");
    out << calibration_json(runs, table, strengths).dump(2) << "\n";
  }
  if (args.has("junit")) write_junit(runs, args.get("junit"));
  std::cout << (unexpected == 0 ? "PASS" : "FAIL") << ": " << runs.size() - unexpected << "/" << runs.size()
            << " runs as expected\n";
  return unexpected == 0 ? 0 : 1;
}

}  // namespace gemma4::cli
