// Column formatting for the CLI's tables.
#pragma once

#include <iomanip>
#include <sstream>
#include <string>

namespace gemma4::cli {

// `s` padded with spaces to `width` (longer strings are left whole).
inline std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s;
}

// A number in scientific notation with three significant digits: 1.23e-04.
inline std::string sci(double v) {
  std::ostringstream s;
  s << std::scientific << std::setprecision(2) << v;
  return s.str();
}

}  // namespace gemma4::cli
