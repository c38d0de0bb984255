#include "conformance/isa_levels.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "reference/error.h"

namespace gemma4::conformance {
namespace {

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

}  // namespace

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

}  // namespace gemma4::conformance
