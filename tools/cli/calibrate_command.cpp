// gemma4-conform calibrate: every legitimate implementation must pass the whole suite and every
// faulty backend must fail where it says, in each dtype and at each CPU ISA level asked for; then
// the separation table, per dtype and category, of how close correct code came to the bounds and
// how far the weakest bug went past them. The runs happen in this process (conformance/suite.h);
// --isolate, and any ISA level but the native one, run each in a child process.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

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

int calibrate_command(const std::vector<std::string>& argv) {
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
                  "ratio. Exit 1 when any run is not as expected.",
                  options, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  std::vector<torch::ScalarType> dtypes;
  {
    const std::string list = args.get("dtype", "all");
    std::istringstream in(list == "all" ? "f32,bf16,f16" : list);
    for (std::string d; std::getline(in, d, ',');) dtypes.push_back(parse_dtype(d));
  }
  const torch::Device device = parse_device(args.get("device", "cpu"));
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

  std::vector<Subject> subjects = builtin_subjects(args.get("backends"));
  static std::vector<impl::Backend> plugins;  // the subjects point into it for the whole run
  {
    const std::vector<std::string> paths = split_commas(args.get("backend-lib"));
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
  auto category_list = [&](const char* option) {
    std::vector<Category> out;
    for (const std::string& name : split_commas(args.get(option))) {
      const std::optional<Category> c = parse_category(name);
      if (!c) {
        std::string known;
        for (const CategoryInfo& info : categories()) known += (known.empty() ? "" : ", ") + std::string(info.name);
        throw UsageError{"--" + std::string(option) + ": unknown category '" + name + "' (" + known + ")"};
      }
      out.push_back(*c);
    }
    return out;
  };
  std::vector<Category> selected = category_list("categories");
  const std::vector<Category> skipped = category_list("skip-categories");
  if (selected.empty()) {
    for (const CategoryInfo& c : categories()) selected.push_back(c.category);
  }
  selected.erase(std::remove_if(selected.begin(), selected.end(),
                                [&](Category c) { return std::count(skipped.begin(), skipped.end(), c) > 0; }),
                 selected.end());
  if (selected.empty()) throw UsageError{"--categories and --skip-categories leave no category"};
  std::vector<CalibrationRun> runs = plan_runs(subjects, dtypes, isas, device, selected);
  // In this process unless asked otherwise; an ISA level must be set before oneDNN starts.
  std::vector<size_t> here, children;
  for (size_t i = 0; i < runs.size(); ++i) (args.has("isolate") || !runs[i].isa.native() ? children : here).push_back(i);
  std::cout << "gemma4-conform calibrate: " << runs.size() << " runs on " << (device.is_cuda() ? "cuda" : "cpu") << ", "
            << here.size() << " in this process, " << children.size() << " in child processes\n";

  size_t finished = 0;
  int unexpected = 0;
  auto conclude = [&](CalibrationRun& r) {
    r.judgement = judge(r.run, r.categories, r.expect);
    unexpected += r.judgement.as_expected ? 0 : 1;
    std::cout << "  [" << ++finished << "/" << runs.size() << "] " << column(r.backend().name, 44) << column(r.run.dtype, 4)
              << column(r.isa.name, 16) << column("expect " + std::string(expectation_name(r.expect)), 15)
              << (r.judgement.as_expected ? "ok   " : "WRONG ") << r.judgement.finding << " (" << std::fixed
              << std::setprecision(1) << r.run.seconds << " s)\n"
              << std::defaultfloat << std::flush;
  };
  SuiteOptions base;
  base.device = device;
  base.steps = int_option(args, "steps", 0, 1);  // 0: the category's default
  base.golden_dir = files::join(golden::data_dir(), "golden");
  for (size_t i : here) {
    CalibrationRun& r = runs[i];
    SuiteOptions o = base;
    o.backend = r.backend(), o.dtype = r.dtype;
    RunOptions quiet;  // the rows go to the report; one line per run here
    quiet.filter = categories_filter(r.categories);
    r.run = run_suite(o, quiet);
    conclude(r);
  }
  if (!children.empty()) {
    const std::string work_dir = args.has("work-dir") ? args.get("work-dir") : files::make_temp_directory("gemma4_calibrate_");
    files::make_directories(work_dir);
    // Children side by side share the cores: each gets its share of threads unless told otherwise.
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    std::vector<IsolatedJob> child_jobs;
    for (size_t i : children) {
      const CalibrationRun& r = runs[i];
      IsolatedJob job;
      job.conform_args = r.subject.select;
      job.conform_args.insert(job.conform_args.end(), {"--device", device.is_cuda() ? "cuda" : "cpu", "--dtype",
                                                       golden::dtype_name(r.dtype)});
      const std::string filter = categories_filter(r.categories);
      if (!filter.empty()) job.conform_args.insert(job.conform_args.end(), {"--filter", filter});
      if (base.steps > 0) job.conform_args.insert(job.conform_args.end(), {"--steps", std::to_string(base.steps)});
      job.env = r.isa.env;
      if (!std::getenv("OMP_NUM_THREADS")) job.env.emplace("OMP_NUM_THREADS", std::to_string(std::max(1, cores / jobs)));
      job.label.subject = r.backend().name;
      job.label.device = device.is_cuda() ? "cuda" : "cpu";
      job.label.dtype = golden::dtype_name(r.dtype);
      child_jobs.push_back(std::move(job));
    }
    std::cout << "  child processes: " << jobs << " at a time, reports and logs in " << work_dir << "\n";
    run_isolated(child_jobs, jobs, timeout, work_dir, [&](size_t k, Run run) {
      runs[children[k]].run = std::move(run);
      conclude(runs[children[k]]);
    });
  }

  const std::vector<Separation> table = separation_table(runs);
  const std::vector<FaultyStrength> strengths = faulty_strengths(runs);
  print_separation(table);
  if (args.has("report")) write_json(args.get("report"), calibration_json(runs, table, strengths));
  if (args.has("junit")) write_junit(args.get("junit"), calibration_summary(runs));
  std::cout << (unexpected == 0 ? "PASS" : "FAIL") << ": " << runs.size() - unexpected << "/" << runs.size()
            << " runs as expected\n";
  return unexpected == 0 ? 0 : 1;
}

}  // namespace gemma4::cli
