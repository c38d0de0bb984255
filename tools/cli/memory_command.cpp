// gemma4-conform memory: activation memory of the released geometries (bench/memory/
// ACTIVATION_MEMORY.md). `measure` runs the sweep (bench/memory/sweep.h) on a device and writes the
// points; `report` re-estimates a points file with this build's closed form and prints the table,
// the safety factor, the fused kernels' saving and the planner rules, with SVG, JSON and JUnit on
// request. This file is the commands' options; the work is in bench/memory.
#include <torch/version.h>

#include <iostream>

#include "bench/memory/activation_estimate.h"
#include "bench/memory/memory_report.h"
#include "bench/memory/sweep.h"
#include "git_sha.h"  // generated at build time
#include "golden/model_cases.h"
#include "impl/backend.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {
namespace {

using memory::MemoryFile;

const char* kMeasureSummary =
    "Measure peak activation memory: for each geometry, backend and phase, every decoder-layer kind\n"
    "(sliding, global, and their KV-shared forms) and the edges (embeddings, PLE, final norm, LM head,\n"
    "loss) alone, each as the allocator's peak above its weights, gradient buffers and inputs; then the\n"
    "stack combined from them as a planner sums it (bench/memory/ACTIVATION_MEMORY.md). A point that does\n"
    "not fit (by the estimate, or by an out-of-memory error) is listed as skipped with why. Writes the\n"
    "points JSON with the closed-form estimate beside each measurement and the covering safety factor.";

const char* kReportSummary =
    "Report a points file (memory measure --out; several are merged): re-estimate every point with this build's closed "
    "form,\n"
    "print estimate, measured, ratio and the one safety factor that covers them, how much less the fused\n"
    "kernels need than the reference, and the planner rules against each serving point. Exit 1 when the\n"
    "file's safety factor no longer covers a point under this build's estimate.";

const std::vector<Option> kMeasureOptions = {
    {"out", "FILE", "the points JSON to write", true},
    {"device", "DEVICE", "cuda (default) | cpu (the tracking allocator; for trying the command)"},
    {"dtype", "DTYPE", "bf16 (default) | f16 | f32"},
    {"geometries", "LIST", "released geometries, comma-separated (default 31b,26b-a4b,e2b,e4b)"},
    {"backends", "LIST", "backends, comma-separated (default reference,cuda)"},
    {"phases", "LIST", "train,train_checkpointed,prefill,decode (default all)"},
    {"train-tokens", "LIST", "sequence lengths of the training phases (default 1024,...,32768)"},
    {"prefill-tokens", "LIST", "prompt lengths of prefill (default 512,...,32768)"},
    {"decode-batches", "LIST", "batch sizes of decode (default 1,2,4,...,256)"},
    {"context", "N", "cache entries each decoding sequence has before its new token (default 4096)"},
    {"whole", "LIST",
     "geometries whose whole model is also run directly where it fits, in training and decode,\n"
     "to check the stack's combination of parts (default e2b,e4b; 'none' for none)"},
};

const std::vector<Option> kReportOptions = {
    {"json", "FILE", "write the re-estimated points file (estimates and safety factor of this build)"},
    {"svg", "FILE", "write the chart: bytes against tokens per geometry and phase, with the estimate"},
    {"junit", "FILE", "write JUnit XML: one test case per point, failing above estimate x safety factor"},
};

std::vector<int64_t> int_list(const Args& args, const std::string& name, const std::vector<int64_t>& fallback) {
  if (!args.has(name)) return fallback;
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(args.get(name))) {
    const std::optional<int64_t> v = whole_number(item);
    if (!v || *v <= 0) throw UsageError{"--" + name + ": '" + item + "' is not a positive integer"};
    out.push_back(*v);
  }
  if (out.empty()) throw UsageError{"--" + name + " is empty"};
  return out;
}

memory::SweepPlan plan_of(const Args& args) {
  memory::SweepPlan plan;
  std::string known;
  for (const golden::ReleasedModel& r : golden::released_models()) known += (known.empty() ? "" : ",") + r.name;
  plan.geometries = split_commas(args.get("geometries", known));
  for (const std::string& g : plan.geometries) {
    if (!memory::released_geometries().count(g))
      throw UsageError{"--geometries: unknown geometry '" + g + "' (known: " + known + ")"};
  }
  for (const std::string& b : split_commas(args.get("backends", "reference,cuda"))) {
    memory::kernels_of_backend(b);  // only backends the estimate knows
    plan.backends.push_back(&impl::find_backend(b));
  }
  for (const std::string& p : split_commas(args.get("phases", "train,train_checkpointed,prefill,decode"))) {
    plan.phases.push_back(memory::parse_phase(p));
  }
  plan.train_tokens = int_list(args, "train-tokens", {1024, 2048, 4096, 8192, 16384, 32768});
  plan.prefill_tokens = int_list(args, "prefill-tokens", {512, 1024, 2048, 4096, 8192, 16384, 32768});
  plan.decode_batches = int_list(args, "decode-batches", {1, 2, 4, 8, 16, 32, 64, 128, 256});
  plan.context = int_list(args, "context", {4096}).front();
  if (plan.context < 2) throw UsageError{"--context must be at least 2"};
  plan.whole = split_commas(args.get("whole", "e2b,e4b"));
  return plan;
}

int measure(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("memory measure", kMeasureSummary, kMeasureOptions, argv)) return 0;
  const torch::Device device = parse_device(args.get("device", "cuda"));
  const torch::ScalarType dtype = parse_dtype(args.get("dtype", "bf16"));
  MemoryFile file = memory::run_sweep(plan_of(args), device, dtype, std::cerr);
  file.generator = std::string("gemma4-conform memory ") + GEMMA4_GIT_SHA;
  file.torch_version = TORCH_VERSION;
  file.dtype = args.get("dtype", "bf16");
  memory::write_memory_file(args.get("out"), file);
  std::cout << file.points.size() << " points measured, " << file.skipped.size() << " skipped; safety factor "
            << file.safety_factor << "; wrote " << args.get("out") << "\n";
  return 0;
}

int report(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("memory report FILE...", kReportSummary, kReportOptions, argv)) return 0;
  if (args.positional().empty()) throw UsageError{"expected a points file (or several, to merge)"};
  const std::string path = args.positional()[0];
  MemoryFile file = memory::merge_memory_files(args.positional());
  const double committed = file.safety_factor;
  memory::reestimate(file, path);
  memory::print_memory_report(std::cout, file);
  if (args.has("json")) memory::write_memory_file(args.get("json"), file);
  if (args.has("svg")) memory::write_memory_svg(args.get("svg"), file);
  if (args.has("junit")) {
    MemoryFile judged = file;
    judged.safety_factor = committed;
    memory::write_memory_junit(args.get("junit"), judged, args.positional().size() == 1 ? path : "memory");
  }
  if (file.safety_factor > committed) {
    std::cout << "\nFAIL: the file's safety factor " << committed << " does not cover every point under this build's "
              << "estimate (needs " << file.safety_factor << ")\n";
    return 1;
  }
  return 0;
}

}  // namespace

int memory_command(const std::vector<std::string>& args) {
  const std::string usage =
      "usage: gemma4-conform memory measure --out FILE [options] | memory report FILE [options]  (--help on each)";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << usage << "\n\n  measure  " << kMeasureSummary << "\n\n  report   " << kReportSummary << "\n";
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "measure") return measure(rest);
  if (args[0] == "report") return report(rest);
  throw UsageError{"unknown memory subcommand '" + args[0] + "'; " + usage};
}

}  // namespace gemma4::cli
