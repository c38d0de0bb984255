#pragma once
// Number formats and ordering shared by the memory report's text (memory_report.cpp) and chart
// (memory_chart.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/memory/memory_report.h"

namespace gemma4::memory::format {

inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
// Four significant digits, at most 8 characters: decode points of a few KiB and training points of
// 100+ GiB share columns.
inline std::string gib(double bytes) {
  const double v = bytes / kGiB;
  return fmt(v != 0 && std::fabs(v) < 0.001 ? "%.2e" : "%.4g", v);
}
// x1.23, x123, x4.4e+05 (a decode point against 15 GiB), x0.0013 (a multiple far under one).
inline std::string times(double factor) {
  return "x" + fmt(factor < 1 ? "%.2g" : factor < 100 ? "%.2f" : factor < 1e4 ? "%.0f" : "%.2g", factor);
}

// The index of `value` in `seen`, appended when new: the file's order of first appearance.
template <typename T>
size_t index_in(std::vector<T>& seen, const T& value) {
  const size_t i = std::find(seen.begin(), seen.end(), value) - seen.begin();
  if (i == seen.size()) seen.push_back(value);
  return i;
}

}  // namespace gemma4::memory::format
