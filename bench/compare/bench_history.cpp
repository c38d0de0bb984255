#include "bench/compare/bench_history.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "reference/error.h"

namespace gemma4::bench {
namespace {

// Lines are read as ordered_json too: a line's benchmarks keep the report's order.
using nlohmann::ordered_json;

const std::string kManualTime = "/manual_time";

std::string without_manual_time(const std::string& name) {
  const size_t n = kManualTime.size();
  return name.size() > n && name.compare(name.size() - n, n, kManualTime) == 0 ? name.substr(0, name.size() - n)
                                                                               : name;
}

std::string context(const BenchReport& report, const std::string& key, bool required) {
  auto it = report.context.find(key);
  if (it != report.context.end() && !it->second.empty()) return it->second;
  if (required) {
    throw Error(report.path + ": context '" + key + "' is missing (a gemma4-bench report records it; the history " +
                "needs it to place the run)");
  }
  return "";
}

// Line parsing: each accessor names the line and the field at fault.
std::string string_field(const ordered_json& object, const std::string& key, bool required, const std::string& where) {
  if (!object.contains(key)) {
    if (required) throw Error(where + ": '" + key + "' is missing");
    return "";
  }
  if (!object[key].is_string()) throw Error(where + ": '" + key + "' is not a string");
  return object[key].get<std::string>();
}

double number_field(const ordered_json& object, const std::string& key, bool required, const std::string& where) {
  if (!object.contains(key)) {
    if (required) throw Error(where + ": '" + key + "' is missing");
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (!object[key].is_number()) throw Error(where + ": '" + key + "' is not a number");
  return object[key].get<double>();
}

HistoryResult result_from_json(const std::string& name, const ordered_json& value, const std::string& where) {
  if (!value.is_object()) throw Error(where + " is not an object");
  HistoryResult r;
  r.name = name;
  if (value.contains("skipped")) {
    r.skip_reason = string_field(value, "skipped", true, where);
    if (r.skip_reason.empty()) throw Error(where + ": 'skipped' is empty (it holds the reason)");
    return r;
  }
  r.median_s = number_field(value, "median_s", true, where);
  r.min_s = number_field(value, "min_s", false, where);
  r.max_s = number_field(value, "max_s", false, where);
  for (const std::string& counter : kSpeedCounters) {
    if (value.contains(counter)) r.speed[counter] = number_field(value, counter, true, where);
  }
  return r;
}

HistoryRun run_from_json(const ordered_json& line, const std::string& where) {
  if (!line.is_object()) throw Error(where + ": not a JSON object");
  HistoryRun run;
  run.commit = string_field(line, "commit", true, where);
  run.date = string_field(line, "date", true, where);
  run.gpu = string_field(line, "gpu", true, where);
  run.gpu_uuid = string_field(line, "gpu_uuid", false, where);
  run.host = string_field(line, "host", false, where);
  run.nvidia_driver = string_field(line, "nvidia_driver", false, where);
  run.torch = string_field(line, "torch", false, where);
  run.cudnn = string_field(line, "cudnn", false, where);
  run.cuda_runtime = string_field(line, "cuda_runtime", false, where);
  if (line.contains("repetitions")) {
    if (!line["repetitions"].is_number_integer()) throw Error(where + ": 'repetitions' is not a whole number");
    run.repetitions = line["repetitions"].get<int>();
  }
  run.label = string_field(line, "label", false, where);
  run.source = string_field(line, "source", false, where);
  if (!line.contains("benchmarks") || !line["benchmarks"].is_object()) {
    throw Error(where + ": 'benchmarks' is missing or not an object");
  }
  for (const auto& [name, value] : line["benchmarks"].items()) {
    run.benchmarks.push_back(result_from_json(name, value, where + ": benchmarks '" + name + "'"));
  }
  return run;
}

// Seconds since 1970 of "YYYY-MM-DDTHH:MM:SS" with "Z", "+HH:MM" or "+HHMM" (none: UTC); NaN when
// the text is not of that form. Google Benchmark writes local time with its offset, so two hosts'
// dates only compare as instants.
double instant(const std::string& date) {
  int y, mo, d, h, mi, s, consumed = 0;
  if (std::sscanf(date.c_str(), "%4d-%2d-%2d%*1[T ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &consumed) != 6) {
    return NAN;
  }
  std::string zone = date.substr(static_cast<size_t>(consumed));
  if (!zone.empty() && zone[0] == '.') zone.erase(0, zone.find_first_not_of("0123456789", 1));  // fractions
  int offset = 0;
  if (!zone.empty() && zone != "Z") {
    int oh = 0, om = 0;
    const char sign = zone[0];
    if ((sign != '+' && sign != '-') || (std::sscanf(zone.c_str() + 1, "%2d:%2d", &oh, &om) != 2 &&
                                         std::sscanf(zone.c_str() + 1, "%2d%2d", &oh, &om) != 2)) {
      return NAN;
    }
    offset = (sign == '-' ? -1 : 1) * (oh * 3600 + om * 60);
  }
  // Days from the civil date (Howard Hinnant's algorithm, proleptic Gregorian).
  y -= mo <= 2;
  const int era = (y >= 0 ? y : y - 399) / 400, yoe = y - era * 400;
  const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1, doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const double days = era * 146097.0 + doe - 719468;
  return days * 86400 + h * 3600 + mi * 60 + s - offset;
}

bool selected(const std::string& name, const std::regex* filter) {
  return !filter || std::regex_search(name, *filter);
}

}  // namespace

const HistoryResult* HistoryRun::find(const std::string& name) const {
  for (const HistoryResult& r : benchmarks) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

bool HistoryRun::uuid_known() const { return !gpu_uuid.empty() && gpu_uuid.rfind("unknown", 0) != 0; }

bool HistoryRun::same_measurement(const HistoryRun& other) const {
  if (commit != other.commit || date != other.date) return false;
  return uuid_known() && other.uuid_known() ? gpu_uuid == other.gpu_uuid : gpu == other.gpu;
}

std::string HistoryRun::describe() const { return commit + ", " + date + ", " + gpu_label(*this); }

HistoryRun history_run(const BenchReport& report, const std::string& label) {
  if (report.benchmarks.empty()) throw Error(report.path + ": holds no benchmarks; nothing to record");
  HistoryRun run;
  run.commit = context(report, "git_sha", true);
  run.date = context(report, "date", true);
  run.gpu = context(report, "gpu", true);
  run.gpu_uuid = context(report, "gpu_uuid", false);
  run.host = context(report, "host_name", false);
  run.nvidia_driver = context(report, "nvidia_driver", false);
  run.torch = context(report, "torch", false);
  run.cudnn = context(report, "cudnn", false);
  run.cuda_runtime = context(report, "cuda_runtime", false);
  run.repetitions = report.repetitions;
  run.label = label;
  run.source = report.path;
  for (const BenchmarkResult& b : report.benchmarks) {
    HistoryResult r;
    r.name = without_manual_time(b.name);
    if (b.skipped()) {
      r.skip_reason = b.skip_reason;
    } else {
      if (!std::isfinite(b.median_seconds)) {
        throw Error(report.path + ": benchmark '" + b.name + "' has neither repetitions nor a median aggregate");
      }
      r.median_s = b.median_seconds;
      if (!b.seconds.empty()) {
        r.min_s = *std::min_element(b.seconds.begin(), b.seconds.end());
        r.max_s = *std::max_element(b.seconds.begin(), b.seconds.end());
      }
      r.speed = b.speed;
    }
    run.benchmarks.push_back(r);
  }
  return run;
}

ordered_json to_json(const HistoryRun& run) {
  ordered_json line;
  line["commit"] = run.commit;
  line["date"] = run.date;
  line["gpu"] = run.gpu;
  if (!run.gpu_uuid.empty()) line["gpu_uuid"] = run.gpu_uuid;
  for (const auto& [key, value] : {std::pair{"host", &run.host}, std::pair{"nvidia_driver", &run.nvidia_driver},
                                   std::pair{"torch", &run.torch}, std::pair{"cudnn", &run.cudnn},
                                   std::pair{"cuda_runtime", &run.cuda_runtime}}) {
    line[key] = *value;
  }
  line["repetitions"] = run.repetitions;
  line["label"] = run.label;
  line["source"] = run.source;
  ordered_json benchmarks = ordered_json::object();
  for (const HistoryResult& r : run.benchmarks) {
    ordered_json entry;
    if (r.skipped()) {
      entry["skipped"] = r.skip_reason;
    } else {
      entry["median_s"] = r.median_s;
      if (std::isfinite(r.min_s)) entry["min_s"] = r.min_s;
      if (std::isfinite(r.max_s)) entry["max_s"] = r.max_s;
      for (const std::string& counter : kSpeedCounters) {
        if (r.speed.count(counter)) entry[counter] = r.speed.at(counter);
      }
    }
    benchmarks[r.name] = entry;
  }
  line["benchmarks"] = benchmarks;
  return line;
}

std::vector<HistoryRun> read_history(const std::string& path, bool missing_is_empty) {
  std::ifstream in(path);
  if (!in) {
    std::error_code ignored;
    if (missing_is_empty && !std::filesystem::exists(path, ignored)) return {};
    throw Error(path + ": cannot be read");
  }
  std::vector<HistoryRun> runs;
  int number = 0;
  for (std::string text; std::getline(in, text);) {
    ++number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // a blank line (the last, say)
    const std::string where = path + ":" + std::to_string(number);
    ordered_json line;
    try {
      line = ordered_json::parse(text);
    } catch (const ordered_json::parse_error& e) {
      throw Error(where + ": not valid JSON (" + e.what() + ")");
    }
    runs.push_back(run_from_json(line, where));
    runs.back().line = number;
  }
  return runs;
}

void append_history(const std::string& path, const std::vector<HistoryRun>& runs) {
  // A file whose last line lacks its newline (edited by hand) gets one first, so that the new line
  // does not run on from it.
  bool needs_newline = false;
  if (std::ifstream existing{path, std::ios::binary}) {
    existing.seekg(0, std::ios::end);
    if (existing.tellg() > 0) {
      existing.seekg(-1, std::ios::end);
      needs_newline = existing.get() != '\n';
    }
  }
  std::ofstream out(path, std::ios::app);
  if (!out) throw Error(path + ": cannot be written");
  if (needs_newline) out << "\n";
  for (const HistoryRun& run : runs) out << to_json(run).dump() << "\n";
  if (!out.flush()) throw Error(path + ": cannot be written");
}

std::vector<HistoryRun> in_date_order(std::vector<HistoryRun> runs) {
  // Dates that are not ISO 8601 sort by their text after the ones that are.
  std::stable_sort(runs.begin(), runs.end(), [](const HistoryRun& a, const HistoryRun& b) {
    const double x = instant(a.date), y = instant(b.date);
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) == std::isnan(y) ? a.date < b.date : std::isnan(y);
    return x < y;
  });
  return runs;
}

std::vector<std::string> benchmark_names(const std::vector<HistoryRun>& runs, const std::regex* filter) {
  std::vector<std::string> ceilings, others;
  std::set<std::string> seen;
  for (const HistoryRun& run : runs) {
    for (const HistoryResult& r : run.benchmarks) {
      if (!selected(r.name, filter) || !seen.insert(r.name).second) continue;
      (r.name.rfind("ceiling/", 0) == 0 ? ceilings : others).push_back(r.name);
    }
  }
  ceilings.insert(ceilings.end(), others.begin(), others.end());
  return ceilings;
}

std::vector<HistoryRun> filtered(std::vector<HistoryRun> runs, const std::regex* filter) {
  for (HistoryRun& run : runs) {
    auto& b = run.benchmarks;
    b.erase(std::remove_if(b.begin(), b.end(), [&](const HistoryResult& r) { return !selected(r.name, filter); }),
            b.end());
  }
  return runs;
}

std::string short_commit(const std::string& commit) {
  const size_t dirty = commit.find("-dirty");
  return commit.substr(0, std::min<size_t>(7, dirty)) + (dirty == std::string::npos ? "" : "-dirty");
}

std::string short_gpu(const std::string& gpu) {
  std::string rest = gpu.rfind("NVIDIA ", 0) == 0 ? gpu.substr(7) : gpu;
  return rest.substr(0, rest.find(' '));
}

std::string short_uuid(const HistoryRun& run) {
  if (!run.uuid_known()) return "uuid unknown";
  const bool prefixed = run.gpu_uuid.rfind("GPU-", 0) == 0;
  return run.gpu_uuid.substr(0, prefixed ? 12 : 8);
}

std::string gpu_label(const HistoryRun& run) { return run.gpu + " " + short_uuid(run); }

}  // namespace gemma4::bench
