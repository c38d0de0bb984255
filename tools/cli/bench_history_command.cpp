// gemma4-conform bench-history: the history of benchmark medians across commits and GPUs (a JSON
// Lines file, bench/history/README.md): append reports to it, draw it as an HTML page, show it.
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "bench/compare/bench_comparison.h"
#include "bench/compare/bench_history.h"
#include "bench/compare/bench_history_html.h"
#include "reference/error.h"
#include "reference/text.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {
namespace {

using bench::HistoryResult;
using bench::HistoryRun;

const char* kHelp =
    "usage: gemma4-conform bench-history <append|html|show> [options]\n\n"
    "The history of benchmark medians across commits and GPUs: a JSON Lines file, one line per recorded\n"
    "gemma4-bench report (bench/history/README.md).\n\n"
    "  append REPORT.json...   add one line per report (refused when the run is already in the file)\n"
    "  html                    draw it: one self-contained HTML page, a chart per benchmark\n"
    "  show                    print it: a table of medians, benchmark by run (or --json)\n\n"
    "gemma4-conform bench-history <subcommand> --help for its options.\n";

const Option kHistoryOption = {"history", "FILE", "the history file (JSON Lines)", true};
const Option kFilterOption = {"filter", "REGEX", "only the benchmarks whose name this regex matches (search)"};

// The --filter regex, or nothing without one.
std::optional<std::regex> filter_option(const Args& args) {
  if (!args.has("filter")) return std::nullopt;
  try {
    return std::regex(args.get("filter"));
  } catch (const std::regex_error& e) {
    throw UsageError{"--filter '" + args.get("filter") + "' is not a regular expression (" + e.what() + ")"};
  }
}

void no_positional(const Args& args) {
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
}

int append_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      kHistoryOption,
      {"label", "LABEL", "what the runs were, recorded in each line (default baseline)"},
  };
  Args args;
  if (!args.parse("bench-history append REPORT.json...",
                  "Append one line per gemma4-bench JSON report to the history (created if missing): its commit,\n"
                  "date, GPU and uuid, driver, torch, cuDNN, CUDA runtime, repetitions, the label and the report's\n"
                  "path, and per benchmark its median, fastest and slowest repetition and speed counters, or why it\n"
                  "was skipped. A run already in the history (same commit, date and GPU uuid, or GPU name without\n"
                  "one) is refused, naming the line that holds it; then nothing is appended.",
                  options, argv)) {
    return 0;
  }
  if (args.positional().empty()) throw UsageError{"give at least one report: REPORT.json..."};
  const std::string path = args.get("history"), label = args.get("label", "baseline");
  if (label.empty()) throw UsageError{"--label must not be empty"};

  const std::vector<HistoryRun> existing = bench::read_history(path, /*missing_is_empty=*/true);
  std::vector<HistoryRun> added;
  for (const std::string& report : args.positional()) {
    HistoryRun run = bench::history_run(bench::read_bench_report(report), label);
    for (const HistoryRun& old : existing) {
      if (old.same_measurement(run)) {
        throw Error(report + ": already in " + path + " at line " + std::to_string(old.line) + " (" + old.describe() +
                    ")");
      }
    }
    for (const HistoryRun& earlier : added) {
      if (earlier.same_measurement(run)) {
        throw Error(report + ": the same run as " + earlier.source + ", given before it (" + run.describe() + ")");
      }
    }
    added.push_back(std::move(run));
  }
  bench::append_history(path, added);
  for (const HistoryRun& run : added) {
    size_t skipped = 0;
    for (const HistoryResult& r : run.benchmarks) skipped += r.skipped();
    std::cout << "appended " << run.commit << " " << run.gpu << " (" << run.benchmarks.size() << " benchmarks, "
              << skipped << " skipped) to " << path << "\n";
  }
  return 0;
}

// The runs of the file in date order; a history without a run is an error (nothing to draw or show).
std::vector<HistoryRun> read_runs(const std::string& path) {
  std::vector<HistoryRun> runs = bench::in_date_order(bench::read_history(path, /*missing_is_empty=*/false));
  if (runs.empty()) throw Error(path + ": holds no runs (add one with bench-history append)");
  return runs;
}

int html_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {kHistoryOption, {"out", "FILE", "the HTML page to write", true}, kFilterOption};
  Args args;
  if (!args.parse("bench-history html",
                  "Write a self-contained HTML page (inline SVG, no scripts) of the history: how many runs,\n"
                  "commits and GPUs; a table of each benchmark's first and latest median per GPU; one chart per\n"
                  "benchmark (ceilings first), the runs in date order on x and, on y, its TFLOP/s or GB/s where\n"
                  "every point has one (with the same run's ceiling dashed), else its median time; one series per\n"
                  "GPU (kind and uuid). Skipped runs are hollow markers on the axis, the reason in their tooltip.",
                  options, argv)) {
    return 0;
  }
  no_positional(args);
  const std::optional<std::regex> filter = filter_option(args);
  const std::vector<HistoryRun> runs = read_runs(args.get("history"));
  const size_t charts = bench::benchmark_names(runs, filter ? &*filter : nullptr).size();
  bench::write_history_html(args.get("out"), args.get("history"), runs, filter ? &*filter : nullptr,
                            args.get("filter"));
  std::cout << "wrote " << args.get("out") << " (" << charts << " charts, " << runs.size() << " runs)\n";
  return 0;
}

// A run's column: "0c1457d@H200"; the uuid's first digits follow the GPU where two GPUs of one kind
// ran, and "#2" where the same commit ran twice on one GPU.
std::vector<std::string> column_names(const std::vector<HistoryRun>& runs) {
  std::map<std::string, std::set<std::string>> kinds;  // short GPU name -> series
  for (const HistoryRun& run : runs) kinds[bench::short_gpu(run.gpu)].insert(run.series_key());
  std::vector<std::string> names;
  std::map<std::string, int> seen;
  for (const HistoryRun& run : runs) {
    std::string gpu = bench::short_gpu(run.gpu);
    if (kinds[gpu].size() > 1) gpu += "/" + bench::short_uuid(run);
    std::string name = bench::short_commit(run.commit) + "@" + gpu;
    const int count = ++seen[name];
    names.push_back(count > 1 ? name + "#" + std::to_string(count) : name);
  }
  return names;
}

int show_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {kHistoryOption, kFilterOption,
                                       {"json", "", "print the parsed history as JSON instead of the table"}};
  Args args;
  if (!args.parse("bench-history show",
                  "Print the history's medians: one row per benchmark (ceilings first), one column per run in date\n"
                  "order, named short commit@GPU. With --json, the runs as JSON in date order: {\"history\": FILE,\n"
                  "\"runs\": [each line's fields, \"line\" (its line in FILE) first]}.",
                  options, argv)) {
    return 0;
  }
  no_positional(args);
  const std::optional<std::regex> filter = filter_option(args);
  const std::regex* selection = filter ? &*filter : nullptr;
  const std::vector<HistoryRun> runs = read_runs(args.get("history"));
  if (args.has("json")) {
    nlohmann::ordered_json doc;
    doc["history"] = args.get("history");
    doc["runs"] = nlohmann::ordered_json::array();
    for (const HistoryRun& run : bench::filtered(runs, selection)) {
      nlohmann::ordered_json line = {{"line", run.line}};
      line.update(bench::to_json(run));
      doc["runs"].push_back(line);
    }
    std::cout << doc.dump(2) << "\n";
    return 0;
  }

  const std::vector<std::string> names = bench::benchmark_names(runs, selection);
  std::vector<std::vector<std::string>> table = {{"benchmark"}};  // rows of cells; the header first
  for (const std::string& column : column_names(runs)) table[0].push_back(column);
  for (const std::string& name : names) {
    table.push_back({name});
    for (const HistoryRun& run : runs) {
      const HistoryResult* r = run.find(name);
      table.back().push_back(!r ? "-" : r->skipped() ? "skipped" : bench::format_seconds(r->median_s));
    }
  }
  std::vector<size_t> widths(table[0].size(), 0);
  for (const auto& row : table) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : table) {
    std::string text = text::pad(row[0], widths[0]);
    for (size_t c = 1; c < row.size(); ++c) text += "  " + std::string(widths[c] - row[c].size(), ' ') + row[c];
    std::cout << text << "\n";
  }
  std::cout << "bench-history: " << names.size() << " benchmarks, " << runs.size() << " runs (median times; "
            << "skipped: the run skipped it; -: not in that run)\n";
  return 0;
}

}  // namespace

int bench_history_command(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    (argv.empty() ? std::cerr : std::cout) << kHelp;
    return argv.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  if (argv[0] == "append") return append_command(rest);
  if (argv[0] == "html") return html_command(rest);
  if (argv[0] == "show") return show_command(rest);
  throw UsageError{"unknown bench-history subcommand '" + argv[0] + "' (append, html, show)"};
}

}  // namespace gemma4::cli
