#include "bench/memory/points.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "golden/model_cases.h"
#include "reference/error.h"

namespace gemma4::memory {
namespace {

using nlohmann::json;

struct PhaseName {
  Phase phase;
  const char* name;
};
constexpr PhaseName kPhases[] = {{Phase::kTrain, "train"},
                                 {Phase::kTrainCheckpointed, "train_checkpointed"},
                                 {Phase::kPrefill, "prefill"},
                                 {Phase::kDecode, "decode"}};
struct PartName {
  Part part;
  const char* name;
};
constexpr PartName kParts[] = {{Part::kStack, "stack"},
                               {Part::kSliding, "sliding"},
                               {Part::kGlobal, "global"},
                               {Part::kSlidingKvShared, "sliding_kv_shared"},
                               {Part::kGlobalKvShared, "global_kv_shared"},
                               {Part::kEdges, "edges"},
                               {Part::kWhole, "whole"}};

// A field of a point, with the file and the point's index in the message when it is missing or
// of the wrong type.
template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw Error(where + ": missing field '" + key + "'");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw Error(where + ": field '" + key + "' has the wrong type (" + j.at(key).dump() + ")");
  }
}

json point_json(const MemoryPoint& p) {
  return {{"geometry", p.geometry},
          {"part", part_name(p.part)},
          {"phase", phase_name(p.phase)},
          {"backend", p.backend},
          {"tokens", p.tokens},
          {"batch", p.batch},
          {"context", p.context},
          {"measured_bytes", p.measured_bytes},
          {"estimate_bytes", p.estimate_bytes}};
}

MemoryPoint parse_point(const json& j, const std::string& where, bool measured) {
  MemoryPoint p;
  p.geometry = field<std::string>(j, "geometry", where);
  try {
    p.part = parse_part(field<std::string>(j, "part", where));
    p.phase = parse_phase(field<std::string>(j, "phase", where));
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  p.backend = field<std::string>(j, "backend", where);
  p.tokens = field<int64_t>(j, "tokens", where);
  p.batch = field<int64_t>(j, "batch", where);
  p.context = field<int64_t>(j, "context", where);
  p.estimate_bytes = field<double>(j, "estimate_bytes", where);
  if (measured) p.measured_bytes = field<double>(j, "measured_bytes", where);
  if (p.tokens <= 0 || p.batch <= 0 || p.context < 0) throw Error(where + ": tokens and batch must be positive");
  if (!(p.estimate_bytes > 0)) throw Error(where + ": estimate_bytes must be positive");
  if (measured && !(p.measured_bytes >= 0 && std::isfinite(p.measured_bytes))) {
    throw Error(where + ": measured_bytes must be a finite number >= 0");
  }
  return p;
}

}  // namespace

const std::vector<Phase>& all_phases() {
  static const std::vector<Phase> all{Phase::kTrain, Phase::kTrainCheckpointed, Phase::kPrefill, Phase::kDecode};
  return all;
}

const std::vector<Part>& all_parts() {
  static const std::vector<Part> all = [] {
    std::vector<Part> out;
    for (const PartName& p : kParts) out.push_back(p.part);
    return out;
  }();
  return all;
}

bool is_training(Phase phase) { return phase == Phase::kTrain || phase == Phase::kTrainCheckpointed; }

std::string phase_name(Phase phase) {
  for (const PhaseName& p : kPhases) {
    if (p.phase == phase) return p.name;
  }
  return "?";
}

std::string part_name(Part part) {
  for (const PartName& p : kParts) {
    if (p.part == part) return p.name;
  }
  return "?";
}

Phase parse_phase(const std::string& name) {
  std::string known;
  for (const PhaseName& p : kPhases) {
    if (name == p.name) return p.phase;
    known += std::string(known.empty() ? "" : ", ") + p.name;
  }
  throw Error("unknown phase '" + name + "' (known: " + known + ")");
}

Part parse_part(const std::string& name) {
  std::string known;
  for (const PartName& p : kParts) {
    if (name == p.name) return p.part;
    known += std::string(known.empty() ? "" : ", ") + p.name;
  }
  throw Error("unknown part '" + name + "' (known: " + known + ")");
}

std::string MemoryPoint::name() const {
  std::string out = geometry + "/" + part_name(part) + "/" + phase_name(phase) + "/" + backend +
                    "/T=" + std::to_string(tokens) + "/B=" + std::to_string(batch);
  if (context > 0) out += "/ctx=" + std::to_string(context);
  return out;
}

double covering_factor(const std::vector<MemoryPoint>& points) {
  double worst = 0;
  for (const MemoryPoint& p : points) worst = std::max(worst, p.ratio());
  // Rounded up to 0.01, with a guard against 1.2 * 100 = 119.99999 rounding up to 1.21.
  return std::ceil(worst * 100 - 1e-9) / 100;
}

MemoryFile read_memory_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read '" + path + "'");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(path + ": expected a JSON object");
  MemoryFile file;
  file.device = field<std::string>(j, "device", path);
  file.generator = field<std::string>(j, "generator", path);
  file.torch_version = field<std::string>(j, "torch_version", path);
  file.dtype = field<std::string>(j, "dtype", path);
  file.safety_factor = field<double>(j, "safety_factor", path);
  const json points = field<json>(j, "points", path);
  if (!points.is_array()) throw Error(path + ": 'points' must be an array");
  for (size_t i = 0; i < points.size(); ++i) {
    file.points.push_back(parse_point(points[i], path + ": points[" + std::to_string(i) + "]", true));
  }
  const json skipped = j.value("skipped", json::array());
  for (size_t i = 0; i < skipped.size(); ++i) {
    const std::string where = path + ": skipped[" + std::to_string(i) + "]";
    file.skipped.push_back({parse_point(skipped[i], where, false), field<std::string>(skipped[i], "reason", where)});
  }
  return file;
}

void write_memory_file(const std::string& path, const MemoryFile& file) {
  json points = json::array(), skipped = json::array();
  for (const MemoryPoint& p : file.points) points.push_back(point_json(p));
  for (const SkippedPoint& s : file.skipped) {
    json j = point_json(s.point);
    j.erase("measured_bytes");
    j["reason"] = s.reason;
    skipped.push_back(j);
  }
  const json j = {{"device", file.device}, {"generator", file.generator},         {"torch_version", file.torch_version},
                  {"dtype", file.dtype},   {"safety_factor", file.safety_factor}, {"points", points},
                  {"skipped", skipped}};
  std::ofstream out(path);
  if (!out) throw Error("cannot write '" + path + "'");
  out << j.dump(1) << "\n";
  if (!out) throw Error("cannot write '" + path + "'");
}

const std::map<std::string, Config>& released_geometries() {
  static const std::map<std::string, Config> geometries = [] {
    const std::string dir = golden::released_configs_dir();
    std::map<std::string, Config> out;
    for (const golden::ReleasedModel& r : golden::released_models()) {
      out.emplace(r.name, parse_config(golden::load_released_config(r.file, dir)));
    }
    return out;
  }();
  return geometries;
}

}  // namespace gemma4::memory
