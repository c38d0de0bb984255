#include "conformance/calibration.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "conformance/suite.h"
#include "reference/error.h"
#include "reference/files.h"

namespace gemma4::conformance {
namespace {

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

std::string join_categories(const std::vector<Category>& categories, const char* separator) {
  std::string out;
  for (Category c : categories) out += (out.empty() ? "" : separator) + std::string(category_name(c));
  return out;
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
  const std::regex filter = option_regex("backends", filter_text);
  std::vector<Subject> out;
  for (const impl::Backend& b : impl::builtin_backends()) {
    if (!is_legitimate(b) && b.kind != impl::BackendKind::kFaulty) continue;
    if (std::regex_search(b.name, filter)) out.push_back({&b, {"--backend", b.name}});
  }
  return out;
}

bool is_legitimate(const impl::Backend& b) {
  return b.kind == impl::BackendKind::kReference || b.kind == impl::BackendKind::kFused ||
         b.kind == impl::BackendKind::kVariant;
}

Expectation expectation_for(const impl::Backend& b, torch::ScalarType dtype) {
  if (is_legitimate(b)) return Expectation::kPass;
  return b.below_reduced_precision && dtype != torch::kFloat32 ? Expectation::kMayPass : Expectation::kFail;
}

std::vector<Category> run_categories(const impl::Backend& b, const std::vector<Category>& selected) {
  if (b.kind != impl::BackendKind::kFaulty) return selected;
  std::vector<Category> out;
  for (Category c : b.fails_in) {
    if (std::count(selected.begin(), selected.end(), c)) out.push_back(c);
  }
  return out;
}

std::string categories_filter(const std::vector<Category>& categories) {
  if (categories.size() == conformance::categories().size()) return "";
  return "^(" + join_categories(categories, "|") + ")/";
}

Judgement judge(const Run& run, const std::vector<Category>& categories, Expectation expect) {
  if (!run.error.empty()) return {false, run.error};
  std::map<Category, int> failing;  // results per category
  std::string first_failure;
  for (const Result& r : run.results) {
    if (r.status != Status::kFail) continue;
    if (r.category) ++failing[*r.category];
    if (first_failure.empty()) first_failure = r.test + " " + r.case_name;
  }
  const std::string checks = std::to_string(run.tests());
  if (expect == Expectation::kPass) {
    if (run.passed()) return {true, "pass (" + checks + " checks)"};
    return {false, "FAILS " + std::to_string(run.failed_tests()) + "/" + checks + " checks, first: " + first_failure};
  }
  std::string shown, missing;
  for (Category c : categories) {
    const std::string name = category_name(c);
    if (failing.count(c)) {
      shown += (shown.empty() ? "" : ", ") + name + " (" + std::to_string(failing[c]) + " results)";
    } else {
      missing += (missing.empty() ? "" : ", ") + name;
    }
  }
  if (expect == Expectation::kMayPass) {
    return {true, shown.empty() ? "passes (its bug is below " + run.dtype + " resolution)" : "fails in " + shown};
  }
  if (missing.empty()) return {true, "fails in " + shown};
  return {false, "PASSES in " + missing + (shown.empty() ? "" : "; fails in " + shown)};
}

std::string CalibrationRun::who() const { return backend().name + (isa.native() ? "" : " @" + isa.name); }

std::vector<CalibrationRun> plan_runs(const std::vector<Subject>& subjects, const std::vector<torch::ScalarType>& dtypes,
                                      const std::vector<IsaLevel>& isas, const torch::Device& device,
                                      const std::vector<Category>& selected) {
  std::vector<CalibrationRun> runs;
  for (const Subject& subject : subjects) {
    const impl::Backend& b = *subject.backend;
    for (torch::ScalarType dtype : dtypes) {
      for (const IsaLevel& isa : isas) {
        if (device.is_cuda() && !isa.native()) continue;  // the ISA levels are the CPU's
        // A backend for another device or dtype (the cuda one on the CPU, or in f32) has nothing to show.
        if (!b.capabilities.unsupported(device, dtype).empty()) continue;
        CalibrationRun run;
        run.categories = run_categories(b, selected);
        if (run.categories.empty()) continue;  // its bug shows only in categories not asked for
        run.subject = subject;
        run.dtype = dtype;
        run.isa = isa;
        run.expect = expectation_for(b, dtype);
        runs.push_back(std::move(run));
      }
    }
  }
  return runs;
}

bool Separation::separated() const { return worst_legitimate <= 1.0 && (faulty_backends == 0 || weakest_faulty > 1.0); }

std::vector<Separation> separation_table(const std::vector<CalibrationRun>& runs) {
  std::vector<std::string> dtypes;
  for (const CalibrationRun& r : runs) {
    if (std::find(dtypes.begin(), dtypes.end(), r.run.dtype) == dtypes.end()) dtypes.push_back(r.run.dtype);
  }
  std::vector<Separation> table;
  for (const std::string& dtype : dtypes) {
    for (const CategoryInfo& info : categories()) {
      Separation s;
      s.dtype = dtype;
      s.category = info.category;
      s.weakest_faulty = kInfinity;
      std::map<std::string, double> faulty_strongest;  // per faulty backend: its weakest run's largest ratio
      for (const CalibrationRun& r : runs) {
        if (r.run.dtype != dtype || !r.run.error.empty()) continue;
        const bool legitimate = r.expect == Expectation::kPass;
        const std::vector<Category>& fails_in = r.backend().fails_in;
        const bool faulty_here = r.expect == Expectation::kFail &&
                                 std::count(fails_in.begin(), fails_in.end(), info.category) > 0;
        if (!legitimate && !faulty_here) continue;
        double largest = 0;
        std::string where;
        for (const Result& row : r.run.results) {
          if (row.category != info.category || row.status == Status::kNotSupported) continue;
          if (row.ratio() >= largest) largest = row.ratio(), where = row.test + " " + row.case_name;
        }
        if (legitimate && largest >= s.worst_legitimate) s.worst_legitimate = largest, s.worst_legitimate_at = r.who() + ": " + where;
        if (faulty_here) {
          auto [it, fresh] = faulty_strongest.emplace(r.backend().name, largest);
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
    if (r.backend().kind != impl::BackendKind::kFaulty || !r.run.error.empty()) continue;
    FaultyStrength f;
    f.backend = r.who();
    f.dtype = r.run.dtype;
    for (const Result& row : r.run.results) {
      if (row.status == Status::kNotSupported) continue;
      if (row.ratio() >= f.ratio) f.ratio = row.ratio(), f.at = row.test + " " + row.case_name;
    }
    out.push_back(f);
  }
  return out;
}

nlohmann::json calibration_json(const std::vector<CalibrationRun>& runs, const std::vector<Separation>& table,
                                const std::vector<FaultyStrength>& strengths) {
  auto number = [](double v) { return std::isinf(v) ? nlohmann::json("inf") : nlohmann::json(v); };
  nlohmann::json j;
  j["tool"] = "calibrate";
  j["runs"] = nlohmann::json::array();
  for (const CalibrationRun& r : runs) {
    nlohmann::json run = to_json(r.run);
    run.update({{"kind", impl::backend_kind_name(r.backend().kind)},
                {"isa", r.isa.name},
                {"expected", expectation_name(r.expect)},
                {"as_expected", r.judgement.as_expected},
                {"finding", r.judgement.finding}});
    j["runs"].push_back(run);
  }
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

Report calibration_summary(const std::vector<CalibrationRun>& runs) {
  Run summary;
  summary.subject = "calibration";
  for (const CalibrationRun& r : runs) {
    Result row;
    row.test = r.backend().name + "." + r.run.dtype + "." + r.isa.name;
    row.status = r.judgement.as_expected ? Status::kPass : Status::kFail;
    row.detail = "expected " + std::string(expectation_name(r.expect)) + ": " + r.judgement.finding;
    summary.results.push_back(row);
    summary.seconds += r.run.seconds;
  }
  return {"calibrate", {summary}};
}

}  // namespace gemma4::conformance
