// gemma4-conform memory: activation memory of the released geometries (bench/memory/
// ACTIVATION_MEMORY.md). `measure` runs the parts on a device and writes the points; `report`
// re-estimates a points file with this build's closed form and prints the table, the safety
// factor, the fused kernels' saving and the planner rules, with SVG, JSON and JUnit on request.
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "bench/memory/activation_estimate.h"
#include "bench/memory/measure.h"
#include "bench/memory/memory_report.h"
#include "git_sha.h"  // generated at build time
#include "golden/model_cases.h"
#include "impl/backend.h"
#include "reference/error.h"
#include "reference/weights.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {
namespace {

using memory::kGiB;
using memory::MemoryFile;
using memory::MemoryPoint;
using memory::Part;
using memory::PartFigures;
using memory::Phase;
using memory::StepShape;

constexpr double kTryAbove = 4.0 / 3.0;

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

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<int64_t> int_list(const Args& args, const std::string& name, const std::vector<int64_t>& fallback) {
  if (!args.has(name)) return fallback;
  std::vector<int64_t> out;
  for (const std::string& item : split(args.get(name))) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
    }
    if (used != item.size() || v <= 0) throw UsageError{"--" + name + ": '" + item + "' is not a positive integer"};
    out.push_back(v);
  }
  if (out.empty()) throw UsageError{"--" + name + " is empty"};
  return out;
}

std::string gib(double bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << bytes / kGiB << " GiB";
  return s.str();
}

struct Request {
  std::string geometry;
  const Config* config;
  const impl::Backend* backend;
  Phase phase;
  StepShape shape;
  bool whole = false;  // also run the whole model directly (training and decode)
};

MemoryPoint point_of(const Request& r, Part part) {
  MemoryPoint p;
  p.geometry = r.geometry;
  p.part = part;
  p.phase = r.phase;
  p.backend = r.backend->name;
  p.batch = r.shape.batch;
  p.tokens = r.phase == Phase::kDecode ? r.shape.batch : r.shape.tokens;
  p.context = r.phase == Phase::kDecode ? r.shape.context : 0;
  p.estimate_bytes = memory::estimate_bytes(*r.config, p);
  return p;
}

// The parts a config has: the edges and each layer kind present.
std::vector<Part> parts_of(const Config& c) {
  std::vector<Part> out{Part::kEdges};
  for (Part part : memory::all_parts()) {
    const bool layer = part != Part::kStack && part != Part::kEdges && part != Part::kWhole;
    if (layer && memory::layer_of_part(c, part)) out.push_back(part);
  }
  return out;
}

double model_weight_bytes(const Config& c, torch::ScalarType dtype) {
  ModelWeights shapes_only;
  return slot_elements(weight_slots(c, shapes_only)) * static_cast<double>(c10::elementSize(dtype));
}

// Measures one part, or says why not. The estimate decides whether to try: a part whose estimated
// peak exceeds the free memory is skipped rather than run into an out-of-memory error.
std::optional<PartFigures> measure_or_skip(const Request& r, Part part, const torch::Device& device,
                                           torch::ScalarType dtype, MemoryFile& file, std::string& why) {
  const MemoryPoint p = point_of(r, part);
  const std::optional<double> free = memory::free_device_bytes(device);
  // The whole model also needs its weights (and their gradient buffers) on the device.
  const double weights =
      part == Part::kWhole ? model_weight_bytes(*r.config, dtype) * (r.phase == Phase::kDecode ? 1 : 2) : 0;
  // The estimate runs up to a third above the measurement at the largest points (the edges in
  // training): a point is tried up to 4/3 of the free memory, an out-of-memory error caught.
  if (free && p.estimate_bytes + weights > *free * kTryAbove) {
    why =
        "needs about " + gib(p.estimate_bytes + weights) + " by the estimate and the weights, " + gib(*free) + " free";
  } else {
    try {
      return memory::measure_part(*r.config, part, r.phase, r.shape, *r.backend, device, dtype);
    } catch (const c10::OutOfMemoryError& e) {
      why = "out of memory";
      memory::release_cached_memory(device);
    }
  }
  file.skipped.push_back({p, why});
  return std::nullopt;
}

void measure_request(const Request& r, const torch::Device& device, torch::ScalarType dtype, MemoryFile& file) {
  std::map<Part, PartFigures> figures;
  std::string missing;
  for (Part part : parts_of(*r.config)) {
    std::string why;
    const std::optional<PartFigures> f = measure_or_skip(r, part, device, dtype, file, why);
    MemoryPoint p = point_of(r, part);
    std::cerr << "  " << p.name() << ": ";
    if (!f) {
      std::cerr << "skipped (" << why << ")\n";
      if (missing.empty()) missing = memory::part_name(part) + " not measured (" + why + ")";
      continue;
    }
    p.measured_bytes = f->peak;
    std::cerr << gib(f->peak) << " (estimate " << gib(p.estimate_bytes) << ")\n";
    file.points.push_back(p);
    figures[part] = *f;
  }
  MemoryPoint stack = point_of(r, Part::kStack);
  if (!missing.empty()) {
    file.skipped.push_back({stack, missing});
    return;
  }
  stack.measured_bytes =
      memory::combine_stack(*r.config, r.phase, r.shape, static_cast<int64_t>(c10::elementSize(dtype)), figures);
  std::cerr << "  " << stack.name() << ": " << gib(stack.measured_bytes) << " (estimate " << gib(stack.estimate_bytes)
            << ")\n";
  file.points.push_back(stack);
  if (!r.whole || r.phase == Phase::kPrefill) return;
  std::string why;
  if (const std::optional<PartFigures> whole = measure_or_skip(r, Part::kWhole, device, dtype, file, why)) {
    MemoryPoint p = point_of(r, Part::kWhole);
    p.measured_bytes = whole->peak;
    std::cerr << "  " << p.name() << ": " << gib(p.measured_bytes)
              << " (the stack as combined: " << gib(stack.measured_bytes) << ")\n";
    file.points.push_back(p);
  } else {
    std::cerr << "  " << point_of(r, Part::kWhole).name() << ": skipped (" << why << ")\n";
  }
}

int measure(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("memory measure", kMeasureSummary, kMeasureOptions, argv)) return 0;
  const torch::Device device = parse_device(args.get("device", "cuda"));
  const torch::ScalarType dtype = parse_dtype(args.get("dtype", "bf16"));
  const auto& geometries = memory::released_geometries();
  std::string known;
  for (const golden::ReleasedModel& r : golden::released_models()) known += (known.empty() ? "" : ",") + r.name;
  std::vector<std::string> names = split(args.get("geometries", known));
  for (const std::string& g : names) {
    if (!geometries.count(g)) throw UsageError{"--geometries: unknown geometry '" + g + "' (known: " + known + ")"};
  }
  std::vector<const impl::Backend*> backends;
  for (const std::string& b : split(args.get("backends", "reference,cuda"))) {
    memory::kernels_of_backend(b);  // only backends the estimate knows
    backends.push_back(&impl::find_backend(b));
  }
  std::vector<Phase> phases;
  for (const std::string& p : split(args.get("phases", "train,train_checkpointed,prefill,decode"))) {
    phases.push_back(memory::parse_phase(p));
  }
  const std::vector<int64_t> train_tokens = int_list(args, "train-tokens", {1024, 2048, 4096, 8192, 16384, 32768});
  const std::vector<int64_t> prefill_tokens =
      int_list(args, "prefill-tokens", {512, 1024, 2048, 4096, 8192, 16384, 32768});
  const std::vector<int64_t> decode_batches = int_list(args, "decode-batches", {1, 2, 4, 8, 16, 32, 64, 128, 256});
  const int64_t context = int_list(args, "context", {4096}).front();
  const std::vector<std::string> whole = split(args.get("whole", "e2b,e4b"));
  if (context < 2) throw UsageError{"--context must be at least 2"};

  MemoryFile file;
  file.device = memory::device_name(device);
  file.generator = std::string("gemma4-conform memory ") + GEMMA4_GIT_SHA;
  file.torch_version = TORCH_VERSION;
  file.dtype = args.get("dtype", "bf16");
  for (const std::string& g : names) {
    const Config& config = geometries.at(g);
    for (const impl::Backend* backend : backends) {
      const std::string unsupported = backend->capabilities.unsupported(device, dtype);
      for (Phase phase : phases) {
        std::vector<StepShape> shapes;
        if (phase == Phase::kDecode) {
          for (int64_t b : decode_batches) shapes.push_back({1, b, context});
        } else {
          for (int64_t t : phase == Phase::kPrefill ? prefill_tokens : train_tokens) shapes.push_back({t, 1, 0});
        }
        std::cerr << g << " " << backend->name << " " << memory::phase_name(phase) << "\n";
        for (size_t i = 0; i < shapes.size(); ++i) {
          const bool direct = std::find(whole.begin(), whole.end(), g) != whole.end();
          const Request r{g, &config, backend, phase, shapes[i], direct};
          if (!unsupported.empty()) {
            for (Part part : parts_of(config))
              file.skipped.push_back({point_of(r, part), "not supported: " + unsupported});
            file.skipped.push_back({point_of(r, Part::kStack), "not supported: " + unsupported});
            continue;
          }
          // The first shape of a phase once more, unrecorded: lazy allocations (library workspaces,
          // kernel caches) then belong to the baseline, not to the first point.
          if (i == 0) {
            MemoryFile warmup;
            for (Part part : parts_of(config)) {
              std::string why;
              measure_or_skip(r, part, device, dtype, warmup, why);
            }
          }
          measure_request(r, device, dtype, file);
        }
        memory::release_cached_memory(device);
      }
    }
  }
  file.safety_factor = memory::covering_factor(file.points);
  memory::write_memory_file(args.get("out"), file);
  std::cout << file.points.size() << " points measured, " << file.skipped.size() << " skipped; safety factor "
            << file.safety_factor << "; wrote " << args.get("out") << "\n";
  return 0;
}

// Several points files of one device and dtype (one measure run per geometry) as one; the
// safety factor the largest of theirs.
MemoryFile merged(const std::vector<std::string>& paths) {
  MemoryFile file = memory::read_memory_file(paths[0]);
  for (size_t i = 1; i < paths.size(); ++i) {
    const MemoryFile more = memory::read_memory_file(paths[i]);
    if (more.device != file.device || more.dtype != file.dtype) {
      throw Error(paths[i] + ": measured on " + more.device + " in " + more.dtype + ", not " + file.device + " in " +
                  file.dtype + " as " + paths[0]);
    }
    file.points.insert(file.points.end(), more.points.begin(), more.points.end());
    file.skipped.insert(file.skipped.end(), more.skipped.begin(), more.skipped.end());
    file.safety_factor = std::max(file.safety_factor, more.safety_factor);
  }
  return file;
}

int report(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("memory report FILE...", kReportSummary, kReportOptions, argv)) return 0;
  if (args.positional().empty()) throw UsageError{"expected a points file (or several, to merge)"};
  const std::string path = args.positional()[0];
  MemoryFile file = merged(args.positional());
  const double committed = file.safety_factor;
  const auto& geometries = memory::released_geometries();
  for (MemoryPoint& p : file.points) {
    if (!geometries.count(p.geometry)) throw Error(path + ": unknown geometry '" + p.geometry + "' in " + p.name());
    p.estimate_bytes = memory::estimate_bytes(geometries.at(p.geometry), p);
  }
  for (memory::SkippedPoint& s : file.skipped) {
    if (geometries.count(s.point.geometry))
      s.point.estimate_bytes = memory::estimate_bytes(geometries.at(s.point.geometry), s.point);
  }
  file.safety_factor = memory::covering_factor(file.points);
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
