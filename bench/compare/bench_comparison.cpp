#include "bench/compare/bench_comparison.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "bench/compare/mann_whitney.h"

namespace gemma4::bench {
namespace {

std::string printf_string(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

Comparison judge(const BenchmarkResult& base, const BenchmarkResult& current, const CompareOptions& options) {
  Comparison c;
  c.name = base.name;
  c.base = &base;
  c.current = &current;
  if (base.skipped() || current.skipped()) {
    c.verdict = Verdict::kSkipped;
    c.note = base.skipped() ? "base: " + base.skip_reason : "new: " + current.skip_reason;
    return c;
  }
  if (base.median_seconds > 0) c.change_percent = (current.median_seconds / base.median_seconds - 1) * 100;
  if (base.seconds.empty() || current.seconds.empty()) {
    c.verdict = Verdict::kAggregatesOnly;
    return c;
  }
  if (base.seconds.size() < options.min_repetitions || current.seconds.size() < options.min_repetitions) {
    c.verdict = Verdict::kTooFewRepetitions;
    return c;
  }
  const MannWhitney test = mann_whitney(base.seconds, current.seconds);
  const bool slower = c.change_percent >= 0;
  c.p = slower ? test.p_b_greater : test.p_b_less;
  if (c.change_percent > options.threshold_percent && test.p_b_greater < options.alpha) {
    c.verdict = Verdict::kRegression;
  } else if (c.change_percent < -options.threshold_percent && test.p_b_less < options.alpha) {
    c.verdict = Verdict::kFaster;
  } else {
    c.verdict = Verdict::kSame;
  }
  return c;
}

std::string context_value(const BenchReport& r, const std::string& key) {
  auto it = r.context.find(key);
  return it == r.context.end() ? "" : it->second;
}

// "different GPUs: base 'NVIDIA H100', new 'NVIDIA H200' (context gpu); ...", or "" when they agree.
std::string context_difference(const BenchReport& base, const BenchReport& current, const std::string& what,
                               const std::string& key) {
  const std::string a = context_value(base, key), b = context_value(current, key);
  if (a == b) return "";
  return "different " + what + ": base '" + a + "', new '" + b + "' (context " + key +
         "); the times may not be comparable";
}

}  // namespace

const std::vector<Verdict>& all_verdicts() {
  static const std::vector<Verdict> verdicts = {
      Verdict::kRegression,     Verdict::kFaster,  Verdict::kSame,       Verdict::kTooFewRepetitions,
      Verdict::kAggregatesOnly, Verdict::kSkipped, Verdict::kOnlyInBase, Verdict::kOnlyInNew};
  return verdicts;
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kRegression: return "regression";
    case Verdict::kFaster: return "faster";
    case Verdict::kSame: return "same";
    case Verdict::kTooFewRepetitions: return "too few repetitions";
    case Verdict::kAggregatesOnly: return "aggregates only";
    case Verdict::kSkipped: return "skipped";
    case Verdict::kOnlyInBase: return "only in base";
    case Verdict::kOnlyInNew: return "only in new";
  }
  return "?";
}

std::vector<Comparison> compare_reports(const BenchReport& base, const BenchReport& current,
                                        const CompareOptions& options) {
  std::vector<Comparison> rows;
  for (const BenchmarkResult& b : base.benchmarks) {
    if (const BenchmarkResult* n = current.find(b.name)) {
      rows.push_back(judge(b, *n, options));
    } else {
      Comparison c;
      c.name = b.name;
      c.base = &b;
      c.verdict = Verdict::kOnlyInBase;
      rows.push_back(c);
    }
  }
  for (const BenchmarkResult& n : current.benchmarks) {
    if (base.find(n.name)) continue;
    Comparison c;
    c.name = n.name;
    c.current = &n;
    c.verdict = Verdict::kOnlyInNew;
    rows.push_back(c);
  }
  return rows;
}

std::vector<std::string> comparison_warnings(const BenchReport& base, const BenchReport& current,
                                             const std::vector<Comparison>& rows, const CompareOptions& options) {
  std::vector<std::string> warnings;
  auto add = [&](const std::string& w) {
    if (!w.empty()) warnings.push_back(w);
  };
  // gemma4-bench writes gpu "none" without one; then the CPU is what was timed. (mhz_per_cpu is
  // not compared: it is read from /proc/cpuinfo and moves with frequency scaling.)
  const auto has_gpu = [](const BenchReport& r) {
    const std::string gpu = context_value(r, "gpu");
    return !gpu.empty() && gpu != "none";
  };
  if (has_gpu(base) || has_gpu(current)) {
    add(context_difference(base, current, "GPUs", "gpu"));
  } else {
    add(context_difference(base, current, "hosts", "host_name"));
    add(context_difference(base, current, "CPU counts", "num_cpus"));
  }
  if (base.repetitions != current.repetitions) {
    add("different repetition counts: base " + std::to_string(base.repetitions) + ", new " +
        std::to_string(current.repetitions));
  }
  for (const auto& [role, r] : {std::pair{"base", &base}, std::pair{"new", &current}}) {
    if (r->aggregates_only()) {
      add(std::string(role) + " report " + r->path +
          " holds only aggregates (no per-repetition rows): no test is possible, medians are shown unjudged");
    }
  }
  for (const Comparison& c : rows) {
    if (c.verdict == Verdict::kTooFewRepetitions) {
      add(c.name + ": " + std::to_string(c.base->seconds.size()) + " repetitions in base, " +
          std::to_string(c.current->seconds.size()) + " in new; the test needs at least " +
          std::to_string(options.min_repetitions) + " on each side, not judged");
    }
    if (c.verdict == Verdict::kAggregatesOnly && !base.aggregates_only() && !current.aggregates_only()) {
      add(c.name + ": no per-repetition rows in " + (c.base->seconds.empty() ? "base" : "new") + ", not judged");
    }
  }
  return warnings;
}

std::string verdict_counts(const std::vector<Comparison>& rows) {
  std::string text;
  for (Verdict v : all_verdicts()) {
    size_t count = 0;
    for (const Comparison& c : rows) count += c.verdict == v;
    if (count == 0) continue;
    text += (text.empty() ? "" : ", ") + std::to_string(count) + " " + verdict_name(v);
  }
  return text.empty() ? "nothing to compare" : text;
}

std::string comparison_json(const BenchReport& base, const BenchReport& current, const std::vector<Comparison>& rows,
                            const std::vector<std::string>& warnings, const CompareOptions& options) {
  using nlohmann::ordered_json;
  const auto number = [](double v) { return std::isfinite(v) ? ordered_json(v) : ordered_json(nullptr); };
  ordered_json doc;
  doc["base"] = base.path;
  doc["new"] = current.path;
  doc["threshold_percent"] = options.threshold_percent;
  doc["alpha"] = options.alpha;
  doc["min_repetitions"] = options.min_repetitions;
  doc["warnings"] = warnings;
  ordered_json counts = ordered_json::object();
  for (Verdict v : all_verdicts()) {
    size_t count = 0;
    for (const Comparison& c : rows) count += c.verdict == v;
    counts[verdict_name(v)] = count;
  }
  doc["counts"] = counts;
  ordered_json json_rows = ordered_json::array();
  for (const Comparison& c : rows) {
    json_rows.push_back({{"name", c.name},
                         {"base_median_s", number(c.base ? c.base->median_seconds : NAN)},
                         {"new_median_s", number(c.current ? c.current->median_seconds : NAN)},
                         {"change_percent", number(c.change_percent)},
                         {"p", number(c.p)},
                         {"verdict", verdict_name(c.verdict)},
                         {"note", c.note}});
  }
  doc["rows"] = json_rows;
  return doc.dump(2) + "\n";
}

std::string format_seconds(double seconds) {
  if (std::isnan(seconds)) return "-";
  static const struct {
    double scale;
    const char* unit;
  } kUnits[] = {{1, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}};
  for (const auto& u : kUnits) {
    const double value = seconds / u.scale;
    if (value < 1 && u.scale > 1e-9) continue;
    const char* format = value < 10 ? "%.3f " : value < 100 ? "%.2f " : "%.1f ";
    return printf_string(format, value) + u.unit;
  }
  return "-";
}

std::string format_percent(double percent) { return std::isnan(percent) ? "-" : printf_string("%+.1f%%", percent); }

std::string format_p(double p) {
  if (std::isnan(p)) return "-";
  return printf_string(p >= 1e-3 ? "%.3f" : "%.1e", p);
}

std::string format_number(double value) { return std::isnan(value) ? "-" : printf_string("%.4g", value); }

}  // namespace gemma4::bench
