#pragma once
// bench-history html: one self-contained HTML page (inline CSS and SVG, no scripts) of a history:
// a header, a table of each benchmark's first and latest median per GPU, and one chart per
// benchmark of its speed (or time) across the runs in date order, one coloured series per GPU,
// with the same run's measured ceiling dashed beside a TFLOP/s or GB/s series.
#include <regex>
#include <string>
#include <vector>

#include "bench/compare/bench_history.h"

namespace gemma4::bench {

// `runs`: in date order (in_date_order); `filter` (regex search on the benchmark name; null: all)
// selects the charts and table rows; `history_path` and `filter_text` (the regex as given, "" for
// none) are named in the header. Throws gemma4::Error
// naming `path` when it cannot be written.
void write_history_html(const std::string& path, const std::string& history_path, const std::vector<HistoryRun>& runs,
                        const std::regex* filter, const std::string& filter_text);

}  // namespace gemma4::bench
