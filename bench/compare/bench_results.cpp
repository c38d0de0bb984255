#include "bench/compare/bench_results.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reference/error.h"

namespace gemma4::bench {
namespace {

using nlohmann::json;

// Seconds per unit of Google Benchmark's time_unit.
double seconds_per(const std::string& unit, const std::string& where) {
  if (unit == "ns") return 1e-9;
  if (unit == "us") return 1e-6;
  if (unit == "ms") return 1e-3;
  if (unit == "s") return 1;
  throw Error(where + ": time_unit '" + unit + "' is not ns, us, ms or s");
}

double number(const json& row, const std::string& key, const std::string& where) {
  if (!row.contains(key) || !row[key].is_number()) throw Error(where + ": '" + key + "' is missing or not a number");
  return row[key].get<double>();
}

std::string text(const json& row, const std::string& key, const std::string& fallback, const std::string& where) {
  if (!row.contains(key)) return fallback;
  if (!row[key].is_string()) throw Error(where + ": '" + key + "' is not a string");
  return row[key].get<std::string>();
}

// Google Benchmark < 1.8 marks SkipWithError rows with error_occurred; 1.8 adds skipped +
// skip_message for SkipWithMessage.
std::string skip_reason(const json& row) {
  if (row.value("error_occurred", false)) return row.value("error_message", std::string("error"));
  if (row.value("skipped", false)) return row.value("skip_message", std::string("skipped"));
  return "";
}

struct Collected {
  BenchmarkResult result;
  std::map<std::string, std::vector<double>> speed_samples;
};

void add_row(const json& row, const std::string& where, Collected& c) {
  const std::string reason = skip_reason(row);
  if (!reason.empty()) {
    c.result.skip_reason = reason;
    return;
  }
  const std::string run_type = text(row, "run_type", "iteration", where);
  const bool median_aggregate = run_type == "aggregate" && text(row, "aggregate_name", "", where) == "median";
  if (run_type != "iteration" && !median_aggregate) return;  // mean, stddev, cv, BigO: not samples
  const double seconds =
      number(row, "real_time", where) * seconds_per(text(row, "time_unit", "ns", where), where);
  if (run_type == "iteration") {
    c.result.seconds.push_back(seconds);
    for (const std::string& counter : kSpeedCounters) {
      if (row.contains(counter)) c.speed_samples[counter].push_back(number(row, counter, where));
    }
  } else {
    c.result.median_seconds = seconds;  // kept only if there are no repetitions (below)
    for (const std::string& counter : kSpeedCounters) {
      if (row.contains(counter)) c.result.speed[counter] = number(row, counter, where);
    }
  }
}

json parse_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot be read");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

const BenchmarkResult* BenchReport::find(const std::string& name) const {
  for (const BenchmarkResult& b : benchmarks) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

bool BenchReport::aggregates_only() const {
  bool ran = false;
  for (const BenchmarkResult& b : benchmarks) {
    if (!b.seconds.empty()) return false;
    ran = ran || !b.skipped();
  }
  return ran;
}

BenchReport read_bench_report(const std::string& path) {
  const json doc = parse_file(path);
  if (!doc.is_object() || !doc.contains("benchmarks") || !doc["benchmarks"].is_array()) {
    throw Error(path + ": no 'benchmarks' array (not a Google Benchmark JSON report)");
  }
  BenchReport report;
  report.path = path;
  if (doc.contains("context") && doc["context"].is_object()) {
    for (const auto& [key, value] : doc["context"].items()) {
      if (value.is_string()) report.context[key] = value.get<std::string>();
      else if (value.is_primitive()) report.context[key] = value.dump();
    }
  }

  std::vector<Collected> collected;  // in order of first appearance
  std::map<std::string, size_t> index;
  int largest_repetitions = 0;
  const json& rows = doc["benchmarks"];
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& row = rows[i];
    std::string where = path + ": benchmarks[" + std::to_string(i) + "]";
    if (!row.is_object()) throw Error(where + " is not an object");
    const std::string name = text(row, "name", "", where);
    if (name.empty()) throw Error(where + ": 'name' is missing or empty");
    where += " '" + name + "'";
    const std::string run_name = text(row, "run_name", name, where);
    if (row.contains("repetitions")) {
      largest_repetitions = std::max(largest_repetitions, static_cast<int>(number(row, "repetitions", where)));
    }
    auto [it, added] = index.emplace(run_name, collected.size());
    if (added) {
      collected.emplace_back();
      collected.back().result.name = run_name;
    }
    add_row(row, where, collected[it->second]);
  }

  for (Collected& c : collected) {
    BenchmarkResult& r = c.result;
    if (!r.seconds.empty()) {
      r.median_seconds = median(r.seconds);
      r.speed.clear();
      for (const auto& [counter, samples] : c.speed_samples) r.speed[counter] = median(samples);
    }
    report.benchmarks.push_back(std::move(r));
  }
  report.repetitions = largest_repetitions;
  if (report.context.count("repetitions")) {
    try {
      report.repetitions = std::stoi(report.context["repetitions"]);
    } catch (const std::exception&) {
      throw Error(path + ": context 'repetitions' is not a number: '" + report.context["repetitions"] + "'");
    }
  }
  return report;
}

}  // namespace gemma4::bench
