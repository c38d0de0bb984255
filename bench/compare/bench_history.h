#pragma once
// bench-history: the medians of recorded benchmark runs across commits and GPUs, one JSON object a
// line (JSON Lines, bench/history/README.md), so that each recorded baseline adds one line to a
// file kept in git. This is the file's model, reading, writing and the orders its views share; the
// command face is tools/cli/bench_history_command.cpp, the chart page bench_history_html.h.
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "bench/compare/bench_results.h"

namespace gemma4::bench {

// One benchmark of one recorded run: its median time (and the fastest and slowest repetition,
// where the report had repetitions), its speed counters, or why it was skipped.
struct HistoryResult {
  std::string name;  // the report's run_name without "/manual_time"
  double median_s = std::numeric_limits<double>::quiet_NaN();
  double min_s = std::numeric_limits<double>::quiet_NaN();
  double max_s = std::numeric_limits<double>::quiet_NaN();
  std::map<std::string, double> speed;  // those of kSpeedCounters it has: medians
  std::string skip_reason;
  bool skipped() const { return !skip_reason.empty(); }
};

// One line of the file: one gemma4-bench report.
struct HistoryRun {
  std::string commit;  // context git_sha, "-dirty" kept: the measured tree had uncommitted changes
  std::string date;    // context date (Google Benchmark's, ISO 8601 with the UTC offset)
  std::string gpu, gpu_uuid, host, nvidia_driver, torch, cudnn, cuda_runtime;
  int repetitions = 0;
  std::string label;   // "baseline", or what the caller said the run was
  std::string source;  // the report's path, as given to append
  std::vector<HistoryResult> benchmarks;  // in the report's order
  int line = 0;  // the 1-based line of the history file it was read from; 0 when not read from one

  const HistoryResult* find(const std::string& name) const;
  // gpu_uuid names a device: not empty and not gemma4-bench's "unknown (nvidia-smi unavailable)".
  bool uuid_known() const;
  // Who measured: the GPU kind and, where known, its uuid. Every lent machine calls itself "vm",
  // so the host name does not tell two H200s apart; the uuid does.
  std::string series_key() const { return gpu + "\n" + (uuid_known() ? gpu_uuid : ""); }
  // The same measurement recorded twice: commit, date and the uuid (the GPU name without one).
  bool same_measurement(const HistoryRun& other) const;
  // How the same run is named in one line of text: "0c1457d7eda3, 2026-11-27T07:48:44+00:00, NVIDIA H200".
  std::string describe() const;
};

// The run a report records. Throws gemma4::Error naming the report when it has no benchmarks, lacks
// the context fields a line needs (git_sha, date, gpu), or has a benchmark without a median.
HistoryRun history_run(const BenchReport& report, const std::string& label);

// A run as one line's object, its keys in a fixed order so that appended lines diff well.
nlohmann::ordered_json to_json(const HistoryRun& run);

// The file's runs in file order; a missing file is an empty history when `missing_is_empty`.
// Throws gemma4::Error "FILE:LINE: ..." naming the field at fault in a malformed line.
std::vector<HistoryRun> read_history(const std::string& path, bool missing_is_empty);

// Appends one line per run (the file is created if missing). Throws gemma4::Error naming the file.
void append_history(const std::string& path, const std::vector<HistoryRun>& runs);

// The runs ordered by their date as an instant (offsets taken into account), file order among equals.
std::vector<HistoryRun> in_date_order(std::vector<HistoryRun> runs);

// The benchmark names of the runs that `filter` (regex search; null: all) selects: the ceilings
// first, then the others, each in order of first appearance.
std::vector<std::string> benchmark_names(const std::vector<HistoryRun>& runs, const std::regex* filter);

// The runs with only the benchmarks `filter` selects (the show --json view).
std::vector<HistoryRun> filtered(std::vector<HistoryRun> runs, const std::regex* filter);

std::string short_commit(const std::string& commit);  // "0c1457d", "631bd73-dirty"
std::string short_gpu(const std::string& gpu);        // "NVIDIA H100 80GB HBM3" -> "H100"
// Which GPU of its kind: "GPU-1a2b3c4d" (nvidia-smi's uuid to its first 8 hex digits), or "uuid unknown".
std::string short_uuid(const HistoryRun& run);
// A run's GPU in one line: "NVIDIA H200 GPU-1a2b3c4d", "NVIDIA H200 uuid unknown".
std::string gpu_label(const HistoryRun& run);

}  // namespace gemma4::bench
