#include "bench/memory/memory_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "bench/memory/memory_format.h"
#include "conformance/report.h"
#include "reference/error.h"
#include "reference/text.h"

namespace gemma4::memory {

using text::pad;
namespace {

using format::fmt;
using format::gib;
using format::index_in;
using format::times;

constexpr double kPlannerMinTokens = 8192;  // SCALED's floor on the batch: max(batch, 8192)

bool is_serving(const MemoryPoint& p) {
  return p.part == Part::kStack && (p.phase == Phase::kPrefill || p.phase == Phase::kDecode);
}

// "T=8192 B=1"; decode points are one new token per sequence, so their tokens are the batch.
std::string shape(const MemoryPoint& p) {
  if (p.phase == Phase::kDecode) return "B=" + std::to_string(p.tokens) + " C=" + std::to_string(p.context);
  return "T=" + std::to_string(p.tokens) + " B=" + std::to_string(p.batch);
}

// Points in reading order: geometry (as first met in the file), part, phase, backend, batch,
// context, tokens, so that each sweep over tokens reads as a block.
std::vector<MemoryPoint> sorted(const std::vector<MemoryPoint>& points) {
  std::vector<std::string> geometries;
  const auto key = [&](const MemoryPoint& p) {
    return std::make_tuple(index_in(geometries, p.geometry), p.part, p.phase, p.backend, p.batch, p.context, p.tokens);
  };
  for (const MemoryPoint& p : points) key(p);  // geometries in the file's order first
  std::vector<MemoryPoint> out = points;
  std::stable_sort(out.begin(), out.end(), [&](const MemoryPoint& a, const MemoryPoint& b) { return key(a) < key(b); });
  return out;
}

size_t widest(const std::vector<std::string>& labels, size_t at_least) {
  for (const std::string& s : labels) at_least = std::max(at_least, s.size() + 1);
  return at_least;
}

void print_header(std::ostream& out, const MemoryFile& file) {
  out << "activation memory: " << file.device << ", " << file.generator << ", torch " << file.torch_version << ", "
      << file.dtype << "\n1 GiB = 2^30 bytes throughout. ratio = measured / estimate;\n"
      << "x factor = estimate x safety factor / measured (>= 1: the factor covers the point)\n";
  const MemoryPoint* worst = nullptr;
  for (const MemoryPoint& p : file.points) {
    if (!worst || p.ratio() > worst->ratio()) worst = &p;
  }
  out << "safety factor " << fmt("%.2f", file.safety_factor);
  if (worst) out << ", set by " << worst->name() << " (ratio " << fmt("%.3f", worst->ratio()) << ")";
  // A file edited by hand, or written with another rounding, would otherwise mislead silently.
  const double covering = covering_factor(file.points);
  if (std::fabs(covering - file.safety_factor) > 0.005) out << "; the points call for " << fmt("%.2f", covering);
  out << "\n";
}

void print_points(std::ostream& out, const MemoryFile& file) {
  out << "\npoints (" << file.points.size() << "):\n  " << pad("geometry", 9) << pad("part", 18) << pad("phase", 19)
      << pad("backend", 10) << pad("tokens", 7) << pad("batch", 6) << pad("context", 8) << pad("measured GiB", 13)
      << pad("estimate GiB", 13) << pad("ratio", 7) << "x factor\n";
  for (const MemoryPoint& p : sorted(file.points)) {
    out << "  " << pad(p.geometry, 9) << pad(part_name(p.part), 18) << pad(phase_name(p.phase), 19)
        << pad(p.backend, 10) << pad(std::to_string(p.tokens), 7) << pad(std::to_string(p.batch), 6)
        << pad(std::to_string(p.context), 8) << pad(gib(p.measured_bytes), 13) << pad(gib(p.estimate_bytes), 13)
        << pad(fmt("%.3f", p.ratio()), 7) << fmt("%.2f", p.estimate_bytes * file.safety_factor / p.measured_bytes)
        << "\n";
  }
  if (file.skipped.empty()) return;
  out << "\nskipped (" << file.skipped.size() << "):\n";
  for (const SkippedPoint& s : file.skipped) out << "  " << s.point.name() << ": " << s.reason << "\n";
}

// Pairs of points that differ only in the backend: what the fused kernels save.
void print_fused(std::ostream& out, const MemoryFile& file) {
  out << "\nfused vs reference (same geometry, part, phase and shape on both backends; the stack listed):\n";
  const std::vector<MemoryPoint> points = sorted(file.points);
  std::vector<std::pair<const MemoryPoint*, const MemoryPoint*>> pairs;
  std::vector<std::string> labels;
  for (const MemoryPoint& r : points) {
    if (r.backend != "reference") continue;
    for (const MemoryPoint& c : points) {
      if (c.backend == "cuda" && std::tie(c.geometry, c.part, c.phase, c.tokens, c.batch, c.context) ==
                                     std::tie(r.geometry, r.part, r.phase, r.tokens, r.batch, r.context)) {
        pairs.emplace_back(&r, &c);
        labels.push_back(r.geometry + "/" + part_name(r.part) + "/" + phase_name(r.phase) + " " +
                         shape(r));
      }
    }
  }
  if (pairs.empty()) {
    out << "  no point was measured on both backends\n";
    return;
  }
  // The stack's pairs one by one; every part's in the summaries per phase.
  const size_t width = widest(labels, 12);
  out << "  " << pad("point", width) << pad("reference", 11) << pad("cuda", 11) << pad("ref/cuda", 10) << "saved GiB\n";
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [r, c] = pairs[i];
    if (r->part != Part::kStack) continue;
    out << "  " << pad(labels[i], width) << pad(gib(r->measured_bytes), 11) << pad(gib(c->measured_bytes), 11)
        << pad(times(r->measured_bytes / c->measured_bytes), 10) << gib(r->measured_bytes - c->measured_bytes) << "\n";
  }
  for (Phase phase : all_phases()) {
    std::vector<double> ratios;
    for (const auto& [r, c] : pairs) {
      if (r->phase == phase) ratios.push_back(r->measured_bytes / c->measured_bytes);
    }
    if (ratios.empty()) continue;
    std::sort(ratios.begin(), ratios.end());
    const size_t n = ratios.size();
    const double median = n % 2 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
    out << "  " << pad(phase_name(phase) + ":", 20) << "reference/cuda median " << times(median) << ", range "
        << times(ratios.front()) << " to " << times(ratios.back()) << " over " << n << " pair" << (n > 1 ? "s" : "")
        << "\n";
  }
}

std::string verdict(double measured, double reserved) {
  if (measured <= reserved) return "over-reserves " + times(reserved / measured);
  const double short_gib = (measured - reserved) / kGiB;  // at most 7 characters, to keep the columns
  return "under-reserves " + fmt(short_gib < 0.001 ? "%.1e" : "%.3g", short_gib);
}

void print_planner(std::ostream& out, const MemoryFile& file) {
  constexpr double kMultiple = 8;
  const std::vector<PlannerRow> rows = planner_rows(file, released_geometries(), kMultiple);
  out << "\nplanner rules against the serving points (part stack, prefill and decode):\n"
      << "  FLAT    15 GiB per device, 30 GiB with an fp8 KV cache: modular's Gemma4MemoryPlanner, "
      << "(30 // kv_dtype_bytes) x 2^30\n"
      << "  SCALED  min(FLAT, unit x 8), unit = max(hidden_size, intermediate_size) x max(batch, 8192) x 2 bytes:\n"
      << "          modular PR #6698 (multiple 8 from its 31B figure); batch = sequences per step (max_batch), so\n"
      << "          the rule assumes at most 8192 tokens per step: a prefill of more in one step exceeds its budget\n"
      << "  under-reserves N: the measurement exceeds the rule by N GiB; over-reserves xF: the rule is F times it;\n"
      << "  needs: measured / unit, the least multiple covering the point\n";
  if (rows.empty()) {
    out << "  no serving points\n";
    return;
  }
  std::vector<std::string> labels;
  for (const PlannerRow& r : rows) {
    labels.push_back(r.point.geometry + " " + phase_name(r.point.phase) + " " + r.point.backend + " " +
                     shape(r.point));
  }
  const size_t width = widest(labels, 6);
  out << "  " << pad("point", width) << pad("measured", 9) << pad("FLAT 15 GiB", 23) << pad("unit", 8)
      << pad("SCALED", 8) << pad("SCALED x8", 23) << "needs\n";
  const PlannerRow *most = nullptr, *most_cuda = nullptr, *most_capped = nullptr;
  std::vector<size_t> above_cap;
  for (size_t i = 0; i < rows.size(); ++i) {
    const PlannerRow& r = rows[i];
    const double measured = r.point.measured_bytes;
    out << "  " << pad(labels[i], width) << pad(gib(measured), 9) << pad(verdict(measured, r.flat_bytes), 23)
        << pad(gib(r.unit_bytes), 8) << pad(gib(r.scaled_bytes), 8) << pad(verdict(measured, r.scaled_bytes), 23)
        << times(r.needed_multiple) << "\n";
    const auto raise = [&](const PlannerRow*& m) {
      if (!m || r.needed_multiple > m->needed_multiple) m = &r;
    };
    raise(most);
    if (r.point.backend == "cuda") raise(most_cuda);
    if (measured > r.flat_bytes) {
      above_cap.push_back(i);
    } else {
      raise(most_capped);
    }
  }
  size_t covered = 0;
  for (const PlannerRow& r : rows) covered += r.point.measured_bytes <= r.scaled_bytes ? 1 : 0;
  const auto which = [&](const PlannerRow* r) {
    return times(r->needed_multiple) + " (" + labels[r - rows.data()] + ")\n";
  };
  out << "\n  SCALED x8 covers " << covered << " of " << rows.size() << " serving points; the measurements call for "
      << which(most);
  if (most_cuda) out << "  the fused kernels (cuda) alone call for " << which(most_cuda);
  // Above FLAT the min() caps the reservation: no multiple reaches these points.
  if (above_cap.empty()) {
    out << "  every serving point is under FLAT 15 GiB: a large enough multiple covers them all\n";
    return;
  }
  if (most_capped) out << "  the points under FLAT call for " << which(most_capped);
  out << "  above even the cap FLAT 15 GiB, where no multiple helps:\n";
  for (size_t i : above_cap) {
    out << "    " << labels[i] << ": " << gib(rows[i].point.measured_bytes) << " GiB"
        << (rows[i].point.measured_bytes > rows[i].flat_fp8_bytes ? ", above the fp8 cap of 30 GiB too" : "") << "\n";
  }
}

// One run of the points file: a row per point, measured bytes against estimate x safety factor;
// skipped points not supported, with why.
conformance::Report judged(const MemoryFile& file, const std::string& subject) {
  conformance::Run run;
  run.subject = subject;
  for (const MemoryPoint& p : file.points) {
    conformance::Result row;
    row.test = p.name();
    row.metric = "bytes";
    row.value = p.measured_bytes;
    row.bound = p.estimate_bytes * file.safety_factor;
    if (row.value > row.bound) {
      row.status = conformance::Status::kFail;
      // GiB and whole bytes: the row's value and bound print in three digits, and a point just
      // above its bound differs from it below GiB's fourth digit.
      row.detail = "measured " + gib(row.value) + " GiB (" + fmt("%.0f", row.value) + " bytes) > estimate " +
                   gib(p.estimate_bytes) + " GiB x safety factor " + fmt("%.2f", file.safety_factor) + " = " +
                   gib(row.bound) + " GiB (" + fmt("%.0f", row.bound) + " bytes)";
    }
    run.results.push_back(row);
  }
  for (const SkippedPoint& s : file.skipped) {
    conformance::Result row;
    row.test = s.point.name();
    row.status = conformance::Status::kNotSupported;
    row.detail = s.reason;
    run.results.push_back(row);
  }
  return {"memory report", {run}};
}

}  // namespace

std::vector<PlannerRow> planner_rows(const MemoryFile& file, const std::map<std::string, Config>& geometries,
                                     double multiple) {
  // FLAT is (30 // kv_dtype_bytes) GiB: 2 bytes (bf16 KV) -> 15, 1 byte (fp8 KV) -> 30.
  const double flat = (30 / 2) * kGiB, flat_fp8 = (30 / 1) * kGiB;
  std::vector<PlannerRow> rows;
  for (const MemoryPoint& p : file.points) {
    if (!is_serving(p)) continue;
    const auto it = geometries.find(p.geometry);
    if (it == geometries.end()) throw Error("memory planner rows: unknown geometry '" + p.geometry + "'");
    const double width = double(std::max(it->second.hidden_size, it->second.intermediate_size));
    // The rule's tokens per step: max(max_batch, 8192), sequences not tokens; it assumes a step
    // holds at most 8192 tokens (a chunked prefill), so a one-step prefill of more is under-reserved.
    const double unit = width * std::max(double(p.batch), kPlannerMinTokens) * 2;
    rows.push_back({p, flat, flat_fp8, unit, std::min(flat, unit * multiple), p.measured_bytes / unit});
  }
  return rows;
}

void print_memory_report(std::ostream& out, const MemoryFile& file) {
  print_header(out, file);
  print_points(out, file);
  print_fused(out, file);
  print_planner(out, file);
}

void write_memory_junit(const std::string& path, const MemoryFile& file, const std::string& subject) {
  conformance::write_junit(path, judged(file, subject));
}

}  // namespace gemma4::memory
