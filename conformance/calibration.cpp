#include "conformance/calibration.h"

#include "conformance/check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace gemma4::conformance {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// "faulty-x", or "faulty-x @AVX2" for a run held to an ISA level.
std::string who(const Run& run) { return run.subject + (run.isa.empty() || run.isa == "native" ? "" : " @" + run.isa); }

bool legitimate(const Run& run) { return run.declared && run.declared->expect == Expectation::kPass; }
bool faulty(const Run& run) { return run.declared && run.declared->expect != Expectation::kPass; }

}  // namespace

bool Separation::separated() const { return worst_legitimate <= 1.0 && (faulty_backends == 0 || weakest_faulty > 1.0); }

std::vector<Separation> separation_table(const Report& calibration) {
  const std::vector<Run>& runs = calibration.runs;
  std::vector<std::string> dtypes;
  for (const Run& r : runs) {
    if (std::find(dtypes.begin(), dtypes.end(), r.dtype) == dtypes.end()) dtypes.push_back(r.dtype);
  }
  std::vector<Separation> table;
  for (const std::string& dtype : dtypes) {
    for (const CategoryInfo& info : categories()) {
      Separation s;
      s.dtype = dtype;
      s.category = info.category;
      s.weakest_faulty = kInfinity;
      std::map<std::string, double> faulty_strongest;  // per faulty backend: its weakest run's largest ratio
      for (const Run& r : runs) {
        if (r.dtype != dtype || !r.error.empty() || !r.declared) continue;
        const bool is_legitimate = legitimate(r);
        const std::vector<Category>& fails_in = r.declared->fails_in;
        const bool faulty_here = r.declared->expect == Expectation::kFail &&
                                 std::count(fails_in.begin(), fails_in.end(), info.category) > 0;
        if (!is_legitimate && !faulty_here) continue;
        double largest = 0;
        std::string where;
        bool judged = false;  // a category left out (--categories, --skip-categories) has no rows
        for (const Result& row : r.results) {
          if (row.category != info.category || row.status == Status::kNotSupported) continue;
          judged = true;
          if (row.ratio() >= largest) largest = row.ratio(), where = row.test + " " + row.case_name;
        }
        if (is_legitimate && largest >= s.worst_legitimate) s.worst_legitimate = largest, s.worst_legitimate_at = who(r) + ": " + where;
        if (faulty_here && judged) {
          auto [it, fresh] = faulty_strongest.emplace(r.subject, largest);
          if (!fresh) it->second = std::min(it->second, largest);
        }
      }
      s.faulty_backends = static_cast<int>(faulty_strongest.size());
      for (const auto& [name, strength] : faulty_strongest) {
        if (strength < s.weakest_faulty) s.weakest_faulty = strength, s.weakest_faulty_by = name;
      }
      if (faulty_strongest.empty()) s.weakest_faulty = 0;
      table.push_back(s);
    }
  }
  return table;
}

std::vector<FaultyStrength> faulty_strengths(const Report& calibration) {
  std::vector<FaultyStrength> out;
  for (const Run& r : calibration.runs) {
    if (!faulty(r) || !r.error.empty()) continue;
    FaultyStrength f;
    f.backend = who(r);
    f.dtype = r.dtype;
    for (const Result& row : r.results) {
      if (row.status == Status::kNotSupported) continue;
      if (row.ratio() >= f.ratio) f.ratio = row.ratio(), f.at = row.test + " " + row.case_name;
    }
    out.push_back(f);
  }
  return out;
}

nlohmann::json calibration_json(const Report& calibration, const std::vector<Separation>& table,
                                const std::vector<FaultyStrength>& strengths) {
  auto number = [](double v) { return std::isinf(v) ? nlohmann::json("inf") : nlohmann::json(v); };
  nlohmann::json j;
  j["tool"] = "calibrate";
  j["runs"] = nlohmann::json::array();
  for (const Run& r : calibration.runs) j["runs"].push_back(to_json(r));
  j["separation"] = nlohmann::json::array();
  for (const Separation& s : table) {
    j["separation"].push_back({{"dtype", s.dtype},
                               {"category", category_name(s.category)},
                               {"worst_legitimate_ratio", number(s.worst_legitimate)},
                               {"worst_legitimate_at", s.worst_legitimate_at},
                               {"weakest_faulty_ratio", s.faulty_backends ? number(s.weakest_faulty) : nlohmann::json()},
                               {"weakest_faulty_by", s.weakest_faulty_by},
                               {"faulty_backends", s.faulty_backends},
                               {"separated", s.separated()}});
  }
  j["faulty_strength"] = nlohmann::json::array();
  for (const FaultyStrength& f : strengths) {
    j["faulty_strength"].push_back({{"backend", f.backend}, {"dtype", f.dtype}, {"ratio", number(f.ratio)}, {"at", f.at}});
  }
  return j;
}

Report calibration_summary(const Report& calibration) {
  Run summary;
  summary.subject = "calibration";
  for (const Run& r : calibration.runs) {
    if (!r.declared) continue;
    Result row;
    row.test = r.subject + "." + r.dtype + "." + r.isa;
    row.status = r.as_declared() ? Status::kPass : Status::kFail;
    row.detail = "expected " + std::string(expectation_name(r.declared->expect)) + ": " + r.declared->finding;
    summary.results.push_back(row);
    summary.seconds += r.seconds;
  }
  return {"calibrate", {summary}};
}

}  // namespace gemma4::conformance
