#include "tools/cli/calibration.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "reference/error.h"
#include "reference/files.h"

namespace gemma4::cli {
namespace {

using conformance::Category;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// oneDNN's level names (ONEDNN_MAX_CPU_ISA), the /proc/cpuinfo flags each needs, and ATen's dispatch
// level that goes with it (ATEN_CPU_CAPABILITY), lowest first.
struct KnownIsa {
  const char* name;
  std::vector<const char*> flags;
  const char* aten;
};
const std::vector<KnownIsa>& known_isas() {
  static const std::vector<KnownIsa> isas = {
      {"AVX2", {"avx2", "fma"}, "avx2"},
      {"AVX512_CORE", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}, "avx512"},
      {"AVX512_CORE_VNNI", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}, "avx512"},
      {"AVX512_CORE_BF16", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"}, "avx512"},
      // AVX512-FP16 (oneDNN's AVX10_1_512, formerly AVX512_CORE_FP16): the f16 GEMMs change path.
      {"AVX10_1_512", {"avx512f", "avx512bw", "avx512_bf16", "avx512_fp16"}, "avx512"},
      {"AVX10_1_512_AMX", {"avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"}, "avx512"},
      {"AVX10_1_512_AMX_FP16", {"avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16"}, "avx512"},
  };
  return isas;
}

std::vector<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::vector<std::string> out;
    for (std::string w; words >> w;) out.push_back(w);
    return out;
  }
  return {};
}

double row_ratio(const nlohmann::json& row) {
  const bool pass = row.at("status") == "pass";
  if (!row.at("value").is_number()) return kInfinity;  // NaN is written as null
  const double value = row.at("value").get<double>(), bound = row.at("bound").get<double>();
  if (bound > 0) return value / bound;
  return pass ? 0.0 : kInfinity;  // a count or a bitwise comparison: 0 passes, anything else fails
}

bool is_legitimate(const impl::Backend& b) {
  return b.kind == impl::BackendKind::kReference || b.kind == impl::BackendKind::kFused ||
         b.kind == impl::BackendKind::kVariant;
}

std::string join_categories(const std::vector<Category>& categories, const char* separator) {
  std::string out;
  for (Category c : categories) out += (out.empty() ? "" : separator) + std::string(conformance::category_name(c));
  return out;
}

torch::ScalarType parse_dtype_name(const std::string& dtype) {
  return dtype == "bf16" ? torch::kBFloat16 : dtype == "f16" ? torch::kFloat16 : torch::kFloat32;
}

}  // namespace

const char* expectation_name(Expectation e) {
  switch (e) {
    case Expectation::kPass: return "pass";
    case Expectation::kFail: return "fail";
    case Expectation::kMayPass: return "may pass";
  }
  return "?";
}

std::vector<IsaLevel> isa_levels_offered() {
  const std::vector<std::string> flags = cpu_flags();
  std::vector<IsaLevel> out;
  for (const KnownIsa& isa : known_isas()) {
    const bool offered = std::all_of(isa.flags.begin(), isa.flags.end(), [&](const char* f) {
      return std::find(flags.begin(), flags.end(), f) != flags.end();
    });
    if (offered) out.push_back({isa.name, {{"ONEDNN_MAX_CPU_ISA", isa.name}, {"ATEN_CPU_CAPABILITY", isa.aten}}});
  }
  out.push_back({"native", {}});
  return out;
}

std::vector<IsaLevel> parse_isa_levels(const std::string& list) {
  const std::vector<IsaLevel> offered = isa_levels_offered();
  if (list.empty() || list == "native") return {offered.back()};
  if (list == "auto") return offered;
  std::vector<IsaLevel> out;
  std::istringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    auto it = std::find_if(offered.begin(), offered.end(), [&](const IsaLevel& l) { return l.name == name; });
    if (it == offered.end()) {
      std::string names;
      for (const IsaLevel& l : offered) names += (names.empty() ? "" : ", ") + l.name;
      throw Error("ISA level '" + name + "' is not offered by this CPU (offered: " + names + ")");
    }
    out.push_back(*it);
  }
  return out;
}

std::vector<Subject> builtin_subjects(const std::string& filter_text) {
  std::regex filter;
  try {
    filter = std::regex(filter_text.empty() ? ".*" : filter_text);
  } catch (const std::regex_error& e) {
    throw Error("--backends '" + filter_text + "' is not a regular expression: " + e.what());
  }
  std::vector<Subject> out;
  for (const impl::Backend& b : impl::builtin_backends()) {
    if (!is_legitimate(b) && b.kind != impl::BackendKind::kFaulty) continue;
    if (std::regex_search(b.name, filter)) out.push_back({&b, {"--backend", b.name}});
  }
  return out;
}

std::vector<CalibrationRun> plan_runs(const std::vector<Subject>& subjects, const std::vector<std::string>& dtypes,
                                      const std::vector<IsaLevel>& isas, const std::string& device,
                                      const std::string& work_dir) {
  std::vector<CalibrationRun> runs;
  for (const Subject& subject : subjects) {
    const impl::Backend& b = *subject.backend;
    for (const std::string& dtype : dtypes) {
      for (const IsaLevel& isa : isas) {
        if (device == "cuda" && isa.name != "native") continue;  // the ISA levels are the CPU's
        // A backend for another device or dtype (the cuda one on the CPU, or in f32) has nothing to show.
        if (!b.capabilities.unsupported(torch::Device(device), parse_dtype_name(dtype)).empty()) continue;
        CalibrationRun run;
        run.backend = &b;
        run.dtype = dtype;
        run.isa = isa;
        run.expect = is_legitimate(b)                                   ? Expectation::kPass
                     : (b.below_reduced_precision && dtype != "f32")   ? Expectation::kMayPass
                                                                        : Expectation::kFail;
        const std::string stem = files::join(work_dir, b.name + "." + dtype + "." + isa.name);
        run.job.args = {"conform", subject.select[0], subject.select[1], "--device", device, "--dtype", dtype,
                        "--report", stem + ".json"};
        // A faulty backend runs the categories where its bug must show, not the whole suite.
        if (b.kind == impl::BackendKind::kFaulty) {
          run.job.args.push_back("--filter");
          run.job.args.push_back("^(" + join_categories(b.fails_in, "|") + ")/");
        }
        run.job.env = isa.env;
        run.job.log_path = stem + ".log";
        runs.push_back(std::move(run));
      }
    }
  }
  return runs;
}

void judge_run(CalibrationRun& run) {
  const std::string report_path = run.job.args[std::find(run.job.args.begin(), run.job.args.end(), "--report") -
                                               run.job.args.begin() + 1];
  if (run.child.outcome != ChildOutcome::kExited || (run.child.exit_code != 0 && run.child.exit_code != 1)) {
    run.as_expected = false;
    run.finding = run.child.outcome == ChildOutcome::kKilledByTimeout ? "timed out"
                  : run.child.outcome == ChildOutcome::kCrashed       ? "crashed"
                                                                        : "exit " + std::to_string(run.child.exit_code) +
                                                                              " (see " + run.job.log_path + ")";
    return;
  }
  std::ifstream in(report_path);
  if (!in) {
    run.as_expected = false;
    run.finding = "no report written (see " + run.job.log_path + ")";
    return;
  }
  run.report = nlohmann::json::parse(in);
  std::map<std::string, int> failing;  // per category
  std::string first_failure;
  for (const auto& row : run.report.at("results")) {
    if (row.at("status") != "fail") continue;
    if (failing[row.at("category")]++ == 0 && first_failure.empty()) {
      first_failure = row.at("test").get<std::string>() + " " + row.at("case").get<std::string>();
    }
  }
  const int checks = run.report.value("checks", 0), failed = run.report.value("failed_checks", 0);
  if (run.expect == Expectation::kPass) {
    run.as_expected = run.child.exit_code == 0 && failed == 0;
    run.finding = run.as_expected ? "pass (" + std::to_string(checks) + " checks)"
                                  : "FAILS " + std::to_string(failed) + "/" + std::to_string(checks) + " checks, first: " +
                                        first_failure;
    return;
  }
  std::string shown, missing;
  for (Category c : run.backend->fails_in) {
    const std::string name = conformance::category_name(c);
    if (failing.count(name)) {
      shown += (shown.empty() ? "" : ", ") + name + " (" + std::to_string(failing[name]) + " results)";
    } else {
      missing += (missing.empty() ? "" : ", ") + name;
    }
  }
  if (run.expect == Expectation::kMayPass) {
    run.as_expected = true;
    run.finding = shown.empty() ? "passes (its bug is below " + run.dtype + " resolution)" : "fails in " + shown;
    return;
  }
  run.as_expected = missing.empty();
  run.finding = missing.empty() ? "fails in " + shown : "PASSES in " + missing + (shown.empty() ? "" : "; fails in " + shown);
}

bool Separation::separated() const { return worst_legitimate <= 1.0 && (faulty_backends == 0 || weakest_faulty > 1.0); }

std::vector<Separation> separation_table(const std::vector<CalibrationRun>& runs) {
  std::vector<std::string> dtypes;
  for (const CalibrationRun& r : runs) {
    if (std::find(dtypes.begin(), dtypes.end(), r.dtype) == dtypes.end()) dtypes.push_back(r.dtype);
  }
  std::vector<Separation> table;
  for (const std::string& dtype : dtypes) {
    for (const conformance::CategoryInfo& info : conformance::categories()) {
      Separation s;
      s.dtype = dtype;
      s.category = info.category;
      s.weakest_faulty = kInfinity;
      std::map<std::string, double> faulty_strongest;  // per faulty backend: its weakest run's largest ratio
      for (const CalibrationRun& r : runs) {
        if (r.dtype != dtype || r.report.is_null()) continue;
        const bool legitimate = r.expect == Expectation::kPass;
        const bool faulty_here = r.expect == Expectation::kFail &&
                                 std::count(r.backend->fails_in.begin(), r.backend->fails_in.end(), info.category) > 0;
        if (!legitimate && !faulty_here) continue;
        double largest = 0;
        std::string where;
        for (const auto& row : r.report.at("results")) {
          if (row.at("category") != info.name || row.at("status") == "not_supported") continue;
          const double ratio = row_ratio(row);
          if (ratio >= largest) largest = ratio, where = row.at("test").get<std::string>() + " " + row.at("case").get<std::string>();
        }
        const std::string who = r.backend->name + (r.isa.name == "native" ? "" : " @" + r.isa.name);
        if (legitimate && largest >= s.worst_legitimate) s.worst_legitimate = largest, s.worst_legitimate_at = who + ": " + where;
        if (faulty_here) {
          auto [it, fresh] = faulty_strongest.emplace(r.backend->name, largest);
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

std::vector<FaultyStrength> faulty_strengths(const std::vector<CalibrationRun>& runs) {
  std::vector<FaultyStrength> out;
  for (const CalibrationRun& r : runs) {
    if (r.backend->kind != impl::BackendKind::kFaulty || r.report.is_null()) continue;
    FaultyStrength f;
    f.backend = r.backend->name + (r.isa.name == "native" ? "" : " @" + r.isa.name);
    f.dtype = r.dtype;
    for (const auto& row : r.report.at("results")) {
      if (row.at("status") == "not_supported") continue;
      const double ratio = row_ratio(row);
      if (ratio >= f.ratio) f.ratio = ratio, f.at = row.at("test").get<std::string>() + " " + row.at("case").get<std::string>();
    }
    out.push_back(f);
  }
  return out;
}

nlohmann::json calibration_json(const std::vector<CalibrationRun>& runs, const std::vector<Separation>& table,
                                const std::vector<FaultyStrength>& strengths) {
  auto number = [](double v) { return std::isinf(v) ? nlohmann::json("inf") : nlohmann::json(v); };
  nlohmann::json j;
  j["runs"] = nlohmann::json::array();
  for (const CalibrationRun& r : runs) {
    j["runs"].push_back({{"backend", r.backend->name},
                         {"kind", impl::backend_kind_name(r.backend->kind)},
                         {"dtype", r.dtype},
                         {"isa", r.isa.name},
                         {"expected", expectation_name(r.expect)},
                         {"as_expected", r.as_expected},
                         {"finding", r.finding},
                         {"seconds", r.child.seconds},
                         {"report", r.job.args[std::find(r.job.args.begin(), r.job.args.end(), "--report") -
                                               r.job.args.begin() + 1]}});
  }
  j["separation"] = nlohmann::json::array();
  for (const Separation& s : table) {
    j["separation"].push_back({{"dtype", s.dtype},
                               {"category", conformance::category_name(s.category)},
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

}  // namespace gemma4::cli
