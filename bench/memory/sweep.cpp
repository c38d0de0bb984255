#include "bench/memory/sweep.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <optional>
#include <ostream>

#include "bench/memory/activation_estimate.h"
#include "bench/memory/measure.h"
#include "bench/memory/memory_format.h"
#include "reference/error.h"
#include "reference/weights.h"

namespace gemma4::memory {
namespace {

// A point is tried up to 4/3 of the free memory: the estimate runs up to a third above the
// measurement at the largest points (the edges in training), and an out-of-memory error is caught.
constexpr double kTryAbove = 4.0 / 3.0;

std::string gib(double bytes) { return format::gib(bytes) + " GiB"; }

// One (geometry, backend, phase, step shape) of the plan.
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
  p.estimate_bytes = estimate_bytes(*r.config, p);
  return p;
}

// The parts a config has: the edges and each layer kind present.
std::vector<Part> parts_of(const Config& c) {
  std::vector<Part> out{Part::kEdges};
  for (Part part : all_parts()) {
    const bool layer = part != Part::kStack && part != Part::kEdges && part != Part::kWhole;
    if (layer && layer_of_part(c, part)) out.push_back(part);
  }
  return out;
}

double model_weight_bytes(const Config& c, torch::ScalarType dtype) {
  ModelWeights shapes_only;
  return slot_elements(weight_slots(c, shapes_only)) * static_cast<double>(c10::elementSize(dtype));
}

class Sweep {
 public:
  Sweep(const torch::Device& device, torch::ScalarType dtype, MemoryFile& file, std::ostream& progress)
      : device_(device), dtype_(dtype), file_(file), progress_(progress) {}

  // Measures one part, or records it as skipped with why. The estimate decides whether to try: a
  // part whose estimated peak exceeds the free memory is skipped rather than run out of memory.
  std::optional<PartFigures> measure_or_skip(const Request& r, Part part, MemoryFile& into, std::string& why) {
    const MemoryPoint p = point_of(r, part);
    const std::optional<double> free = free_device_bytes(device_);
    // The whole model also needs its weights (and their gradient buffers) on the device.
    const double weights =
        part == Part::kWhole ? model_weight_bytes(*r.config, dtype_) * (r.phase == Phase::kDecode ? 1 : 2) : 0;
    if (free && p.estimate_bytes + weights > *free * kTryAbove) {
      why = "needs about " + gib(p.estimate_bytes + weights) + " by the estimate and the weights, " + gib(*free) +
            " free";
    } else {
      try {
        return measure_part(*r.config, part, r.phase, r.shape, *r.backend, device_, dtype_);
      } catch (const c10::OutOfMemoryError&) {
        why = "out of memory";
        release_cached_memory(device_);
      }
    }
    into.skipped.push_back({p, why});
    return std::nullopt;
  }

  // Every part of one request, then the stack combined from them, then the whole model.
  void measure(const Request& r) {
    std::map<Part, PartFigures> figures;
    std::string missing;
    for (Part part : parts_of(*r.config)) {
      std::string why;
      const std::optional<PartFigures> f = measure_or_skip(r, part, file_, why);
      MemoryPoint p = point_of(r, part);
      progress_ << "  " << p.name() << ": ";
      if (!f) {
        progress_ << "skipped (" << why << ")\n";
        if (missing.empty()) missing = part_name(part) + " not measured (" + why + ")";
        continue;
      }
      p.measured_bytes = f->peak;
      progress_ << gib(f->peak) << " (estimate " << gib(p.estimate_bytes) << ")\n";
      file_.points.push_back(p);
      figures[part] = *f;
    }
    MemoryPoint stack = point_of(r, Part::kStack);
    if (!missing.empty()) {
      file_.skipped.push_back({stack, missing});
      return;
    }
    stack.measured_bytes =
        combine_stack(*r.config, r.phase, r.shape, static_cast<int64_t>(c10::elementSize(dtype_)), figures);
    progress_ << "  " << stack.name() << ": " << gib(stack.measured_bytes) << " (estimate "
              << gib(stack.estimate_bytes) << ")\n";
    file_.points.push_back(stack);
    if (!r.whole || r.phase == Phase::kPrefill) return;
    std::string why;
    if (const std::optional<PartFigures> whole = measure_or_skip(r, Part::kWhole, file_, why)) {
      MemoryPoint p = point_of(r, Part::kWhole);
      p.measured_bytes = whole->peak;
      progress_ << "  " << p.name() << ": " << gib(p.measured_bytes)
                << " (the stack as combined: " << gib(stack.measured_bytes) << ")\n";
      file_.points.push_back(p);
    } else {
      progress_ << "  " << point_of(r, Part::kWhole).name() << ": skipped (" << why << ")\n";
    }
  }

  // The first shape of a phase once more, unrecorded: lazy allocations (library workspaces, kernel
  // caches) then belong to the baseline, not to the first point.
  void warm_up(const Request& r) {
    MemoryFile discarded;
    for (Part part : parts_of(*r.config)) {
      std::string why;
      measure_or_skip(r, part, discarded, why);
    }
  }

  void skip_unsupported(const Request& r, const std::string& unsupported) {
    for (Part part : parts_of(*r.config)) file_.skipped.push_back({point_of(r, part), "not supported: " + unsupported});
    file_.skipped.push_back({point_of(r, Part::kStack), "not supported: " + unsupported});
  }

 private:
  torch::Device device_;
  torch::ScalarType dtype_;
  MemoryFile& file_;
  std::ostream& progress_;
};

std::vector<StepShape> shapes_of(const SweepPlan& plan, Phase phase) {
  std::vector<StepShape> shapes;
  if (phase == Phase::kDecode) {
    for (int64_t b : plan.decode_batches) shapes.push_back({1, b, plan.context});
  } else {
    for (int64_t t : phase == Phase::kPrefill ? plan.prefill_tokens : plan.train_tokens) shapes.push_back({t, 1, 0});
  }
  return shapes;
}

}  // namespace

MemoryFile run_sweep(const SweepPlan& plan, const torch::Device& device, torch::ScalarType dtype,
                     std::ostream& progress) {
  MemoryFile file;
  file.device = device_name(device);
  Sweep sweep(device, dtype, file, progress);
  const auto& geometries = released_geometries();
  for (const std::string& g : plan.geometries) {
    const Config& config = geometries.at(g);
    const bool whole = std::find(plan.whole.begin(), plan.whole.end(), g) != plan.whole.end();
    for (const impl::Backend* backend : plan.backends) {
      const std::string unsupported = backend->capabilities.unsupported(device, dtype);
      for (Phase phase : plan.phases) {
        progress << g << " " << backend->name << " " << phase_name(phase) << "\n";
        const std::vector<StepShape> shapes = shapes_of(plan, phase);
        for (size_t i = 0; i < shapes.size(); ++i) {
          const Request r{g, &config, backend, phase, shapes[i], whole};
          if (!unsupported.empty()) {
            sweep.skip_unsupported(r, unsupported);
            continue;
          }
          if (i == 0) sweep.warm_up(r);
          sweep.measure(r);
        }
        release_cached_memory(device);
      }
    }
  }
  file.safety_factor = covering_factor(file.points);
  return file;
}

MemoryFile merge_memory_files(const std::vector<std::string>& paths) {
  MemoryFile file = read_memory_file(paths.at(0));
  for (size_t i = 1; i < paths.size(); ++i) {
    const MemoryFile more = read_memory_file(paths[i]);
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

void reestimate(MemoryFile& file, const std::string& path) {
  const auto& geometries = released_geometries();
  for (MemoryPoint& p : file.points) {
    if (!geometries.count(p.geometry)) throw Error(path + ": unknown geometry '" + p.geometry + "' in " + p.name());
    p.estimate_bytes = estimate_bytes(geometries.at(p.geometry), p);
  }
  for (SkippedPoint& s : file.skipped) {
    if (geometries.count(s.point.geometry))
      s.point.estimate_bytes = estimate_bytes(geometries.at(s.point.geometry), s.point);
  }
  file.safety_factor = covering_factor(file.points);
}

}  // namespace gemma4::memory
