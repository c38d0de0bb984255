#pragma once
// bench-compare --html: one self-contained HTML file (inline CSS and SVG, no scripts) with the
// comparison table, regressions highlighted, and a chart of speed against S for every group of
// benchmarks that differ only in backend and S.
#include <string>
#include <vector>

#include "bench/compare/bench_comparison.h"

namespace gemma4::bench {

// Charts: benchmarks named op/backend/device/geometry/S/dtype/direction[/...] are grouped by
// op, device, geometry, dtype and direction (a CPU and a GPU curve on one axis say nothing); x is
// S on a log2 scale, y the group's TFLOP/s counter where all its benchmarks have one, else GB/s,
// else 1 / median time; one colour per backend, NEW solid, BASE dashed. Other names appear in the
// table only. Throws gemma4::Error naming `path` when it cannot be written.
void write_html_report(const std::string& path, const BenchReport& base, const BenchReport& current,
                       const std::vector<Comparison>& rows, const std::vector<std::string>& warnings,
                       const CompareOptions& options);

}  // namespace gemma4::bench
