#pragma once
// The engine: what `conform`, `calibrate`, the Python package (gemma4_conform.conform) and the
// scoreboard all call to judge backends. It plans the runs (every subject in every device, dtype
// and CPU ISA level it supports), executes each in this process or in a child process (a crash or
// a hang becomes a failing run), and, when asked, judges each run against what its backend
// declares. The result is a Report (report.h). Front ends only parse their options, call
// run_engine, and print.
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "conformance/isa_levels.h"
#include "conformance/report.h"
#include "impl/backend.h"

namespace gemma4::conformance {

// A backend to judge, and how a worker process selects it: {"--backend", name} (in-tree),
// {"--backend-lib", path} (a plugin) or {"--backend", "MODULE:FACTORY"} (made in Python; only a
// Python worker can load it). Empty `select`: it lives in this process only, so it cannot be isolated.
struct Subject {
  impl::Backend backend;
  std::vector<std::string> select;
};
// --backend NAME (exact), all (every in-tree backend) or REGEX (every one it matches). Throws
// gemma4::Error naming the spec when it is neither or matches nothing.
std::vector<Subject> in_tree_subjects(const std::string& spec);
// The in-tree backends of kinds reference, fused, variant and faulty whose name matches `filter`
// (calibrate --backends; "" matches all).
std::vector<Subject> calibration_subjects(const std::string& filter);
Subject plugin_subject(const std::string& path);  // loads the plugin (impl/plugin_loader.h)

// How the runs are seen while the engine works: `planned` once, with every run to make (label,
// kind, ISA level) and what was skipped; `started` before a run's rows come (in this process, as
// they are recorded; from a child, when it has finished), `finished` after them.
struct EngineObserver {
  std::function<void(const std::vector<Run>& runs, const std::vector<std::string>& skipped, bool in_children)> planned;
  std::function<void(size_t index, size_t total, const Run& planned)> started;
  std::function<void(size_t index, size_t total, const Run& run)> finished;
};

struct EngineOptions {
  std::vector<Subject> subjects;
  std::vector<torch::Device> devices{torch::kCPU};
  std::vector<torch::ScalarType> dtypes{torch::kFloat32};
  std::vector<IsaLevel> isas{IsaLevel{}};  // CPU runs only; a level but native runs in a child process
  std::vector<Category> categories;        // empty: every category
  std::string filter;                      // regex on "<category>/<check>"; runs what it and `categories` both allow
  // A faulty backend runs only the categories it declares (calibrate: the rest would show nothing).
  bool declared_categories_only = false;
  // Skip a (subject, device, dtype) the subject does not support; otherwise a plan of one run tries
  // it anyway, so that each check says "not supported" for itself.
  bool skip_unsupported = false;
  int steps = 0;                           // memory_flatness steps; 0: the category's default
  std::string golden_dir;                  // "": golden/ of the data directory
  bool isolate = false;                    // every run in a child process
  int jobs = 1;                            // child processes at a time
  double timeout = 1800;                   // seconds a child may take
  // The worker: the command line that runs one run, to which the engine appends
  // "conform <select> --device D --dtype T ... --report FILE". The CLI gives its own path; the
  // Python package gives {python, "-m", "gemma4_conform"}, which can also load MODULE:FACTORY.
  std::vector<std::string> worker;
  std::map<std::string, std::string> child_env;  // added to each child's environment
  std::string work_dir;                    // children's reports and logs; "": a new temporary directory
  bool expect_declared = false;            // judge every run against its backend's declaration
  // Printing while it runs (null: nothing): each row as it is recorded (failing ones, or all).
  std::ostream* rows_out = nullptr;
  bool all_rows = false;
  bool progress = false;                   // a "[i/N] check" line on stderr, rewritten in place
};

struct EngineResult {
  Report report;
  std::vector<std::string> skipped;  // "<backend>, <device>, <dtype> (why)": what skip_unsupported left out
  std::string work_dir;              // where child processes wrote, if any ran
};

// Throws gemma4::Error when nothing can run (no subject, no supported combination, a bad filter).
EngineResult run_engine(const EngineOptions& options, const EngineObserver& observer = {});

// The front ends' ending, the same for each: one run's summary by category, or the matrix of many;
// with expect_declared, each run's verdict against its declaration and the categories not run.
void print_conclusion(std::ostream& out, const Report& report, bool expect_declared);
// 0 when every run passed; with expect_declared, when every judged run behaved as declared and at
// least one was judged. 1 otherwise.
int exit_code(const Report& report, bool expect_declared);

}  // namespace gemma4::conformance
