// gemma4-conform bench-compare: two gemma4-bench JSON reports, benchmark by benchmark; exit 1 when
// one got slower beyond the threshold with statistical support (the CI performance gate).
#include <algorithm>
#include <cmath>
#include <iostream>

#include "bench/compare/bench_comparison.h"
#include "bench/compare/bench_report_html.h"
#include "reference/files.h"
#include "reference/text.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {

using text::pad;
namespace {

using bench::BenchReport;
using bench::CompareOptions;
using bench::Comparison;
using bench::Verdict;
using bench::format_number;
using bench::format_p;
using bench::format_percent;
using bench::format_seconds;

const char* kSummary =
    "Compare two Google Benchmark JSON reports (gemma4-bench --benchmark_out=F --benchmark_out_format=json).\n"
    "Benchmarks are paired by run_name; the samples are their repetitions' real_time. A benchmark is a\n"
    "regression when its NEW median is slower than the BASE median by more than the threshold and a\n"
    "one-sided Mann-Whitney U test of the repetitions (normal approximation with tie and continuity\n"
    "corrections) gives p < 0.05; faster likewise the other way; otherwise same. The test needs at least\n"
    "9 repetitions on each side: with fewer (or a file of aggregates only) a benchmark is listed, with a\n"
    "warning, and not judged. Benchmarks in one file only, or skipped with an error, are listed too.\n"
    "Prints benchmark, base median, new median, change, p (one-sided, in the direction of the change)\n"
    "and verdict, then a summary. Warns when the runs come from different GPUs (or hosts, without a GPU)\n"
    "or used different repetition counts. Exit 1 on any regression or an unreadable report, 0 otherwise.";

const std::vector<Option> kBenchCompareOptions = {
    {"threshold", "PCT", "smallest change of median, in percent, that can be a verdict (default 5)"},
    {"html", "FILE", "also write a self-contained HTML report: the table and speed-against-S charts"},
    {"json", "FILE", "also write the comparison as JSON: paths, options, warnings, verdict counts, the rows"},
};

double parse_threshold(const std::string& text) {
  size_t used = 0;
  double value = NAN;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  if (used != text.size() || !std::isfinite(value) || value < 0) {
    throw UsageError{"--threshold must be a non-negative percentage, got '" + text + "'"};
  }
  return value;
}

std::string pad_left(const std::string& s, size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

void print_table(const std::vector<Comparison>& rows, std::ostream& out) {
  size_t name_width = std::string("benchmark").size();
  for (const Comparison& c : rows) name_width = std::max(name_width, c.name.size());
  out << pad("benchmark", name_width) << "  " << pad_left("base median", 12) << "  " << pad_left("new median", 12)
      << "  " << pad_left("change", 8) << "  " << pad_left("p", 8) << "  verdict\n";
  for (const Comparison& c : rows) {
    out << pad(c.name, name_width) << "  " << pad_left(format_seconds(c.base ? c.base->median_seconds : NAN), 12)
        << "  " << pad_left(format_seconds(c.current ? c.current->median_seconds : NAN), 12) << "  "
        << pad_left(format_percent(c.change_percent), 8) << "  " << pad_left(format_p(c.p), 8) << "  "
        << bench::verdict_name(c.verdict) << (c.note.empty() ? "" : " (" + c.note + ")") << "\n";
  }
}

}  // namespace

int bench_compare_command(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("bench-compare BASE.json NEW.json", kSummary, kBenchCompareOptions, argv)) return 0;
  if (args.positional().size() != 2) throw UsageError{"give exactly two reports: BASE.json NEW.json"};
  CompareOptions options;
  if (args.has("threshold")) options.threshold_percent = parse_threshold(args.get("threshold"));

  const BenchReport base = bench::read_bench_report(args.positional()[0]);
  const BenchReport current = bench::read_bench_report(args.positional()[1]);
  const std::vector<Comparison> rows = bench::compare_reports(base, current, options);
  const std::vector<std::string> warnings = bench::comparison_warnings(base, current, rows, options);
  for (const std::string& w : warnings) std::cerr << "gemma4-conform bench-compare: warning: " << w << "\n";

  print_table(rows, std::cout);
  size_t regressions = 0;
  for (const Comparison& c : rows) regressions += c.verdict == Verdict::kRegression;
  std::cout << "bench-compare: " << rows.size() << " benchmarks: " << bench::verdict_counts(rows) << " (threshold "
            << format_number(options.threshold_percent) << "%, one-sided Mann-Whitney p < "
            << format_number(options.alpha) << ")\n";
  if (args.has("html")) {
    bench::write_html_report(args.get("html"), base, current, rows, warnings, options);
    std::cout << "wrote " << args.get("html") << "\n";
  }
  if (args.has("json")) {
    files::write_text(args.get("json"), bench::comparison_json(base, current, rows, warnings, options));
    std::cout << "wrote " << args.get("json") << "\n";
  }
  return regressions > 0 ? 1 : 0;
}

}  // namespace gemma4::cli
