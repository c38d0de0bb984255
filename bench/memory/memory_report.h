#pragma once
// `gemma4-conform memory report`: what a file of activation-memory points (bench/memory/points.h)
// says to a person (a text report), to a reader of charts (one SVG) and to CI (JUnit). The text
// report holds every point against its closed-form estimate and the file's safety factor, what the
// fused kernels (backend `cuda`) save against the eager `reference` backend, and the serving points
// against two public planner rules (modular's Gemma4MemoryPlanner), so that a reservation can be
// judged by measurement. Every GiB in these reports is 2^30 bytes.
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "bench/memory/points.h"
#include "reference/config.h"

namespace gemma4::memory {

// The reports' GiB: 2^30 bytes, in every figure, column and chart.
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// One serving point (part stack, phase prefill or decode) against the planner rules:
//  - FLAT: modular/modular's Gemma4MemoryPlanner reserves (30 // kv_dtype_bytes) x 2^30 bytes of
//    activations per device whatever the model: 15 GiB with a bf16 KV cache, 30 GiB with fp8.
//  - SCALED (modular/modular PR #6698): unit = max(hidden_size, intermediate_size) x max(batch, 8192)
//    x 2 bytes (bf16), reservation min(FLAT, unit x multiple). The PR's multiple is 8: its stated 31B
//    effect, 15 GiB -> ~2.6 GiB, is 21504 x 8192 x 2 x 8 = 2.625 GiB. `batch` counts the tokens of
//    the step: tokens x batch in prefill, the sequences (one new token each) in decode.
struct PlannerRow {
  MemoryPoint point;
  double flat_bytes = 0;       // FLAT with a bf16 KV cache (the dtype of the points)
  double flat_fp8_bytes = 0;   // FLAT with an fp8 KV cache
  double unit_bytes = 0;       // SCALED's unit
  double scaled_bytes = 0;     // min(flat_bytes, unit_bytes x multiple)
  double needed_multiple = 0;  // measured / unit: the least multiple that would cover this point
};

// The serving stack points of `file` in file order, each against its geometry's config from
// `geometries` (keyed by the points' geometry names, as released_geometries()). Throws
// gemma4::Error naming the geometry when a point's geometry is not in `geometries`.
std::vector<PlannerRow> planner_rows(const MemoryFile& file, const std::map<std::string, Config>& geometries,
                                     double multiple = 8);

// The plain-text report (header, the table of points, skipped points, fused vs reference, the
// planner rules), for a 120-column terminal. Geometries come from released_geometries().
void print_memory_report(std::ostream& out, const MemoryFile& file);

// One self-contained SVG of the stack points: a panel per (geometry, phase), x = tokens (decode:
// batch) on a log2 scale, y = GiB on a log10 scale; per backend the measured points (solid), the
// estimate (dashed, same colour) and estimate x safety factor (dotted grey); serving panels also
// show FLAT's 15 GiB. Throws gemma4::Error naming `path` when it cannot be written.
void write_memory_svg(const std::string& path, const MemoryFile& file);

// JUnit XML, through the project's one report (conformance/report.h): one run named `subject`, one
// test per point named point.name() (metric "bytes"), failed when the measurement exceeds estimate x
// safety factor; skipped points are not supported, with their reason. Throws gemma4::Error naming
// `path` when it cannot be written.
void write_memory_junit(const std::string& path, const MemoryFile& file, const std::string& subject = "memory");

}  // namespace gemma4::memory
