#pragma once
// CPU instruction-set levels a run can be held to: the most oneDNN may use and ATen's kernel dispatch
// level, so that a run stands for a CPU of that kind (oneDNN rounds differently on each). Both are
// read once per process, so the engine runs a level other than "native" in a child process.
#include <map>
#include <string>
#include <vector>

namespace gemma4::conformance {

struct IsaLevel {
  std::string name = "native";              // "native", "AVX2", "AVX512_CORE_BF16", ...
  std::map<std::string, std::string> env;   // ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY
  bool native() const { return env.empty(); }
};
std::vector<IsaLevel> isa_levels_offered();  // from /proc/cpuinfo, lowest first, "native" last
// "native" alone, or the named levels ("auto": every level this CPU offers). Throws gemma4::Error
// naming an unknown or unavailable level.
std::vector<IsaLevel> parse_isa_levels(const std::string& list);

}  // namespace gemma4::conformance
