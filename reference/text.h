// Text formatting shared by every report the project writes: table columns, numbers, and escaping
// for the XML (JUnit) and HTML it writes. Header-only and free of LibTorch, so that the lowest
// folder can hold it and every other one can use it.
#pragma once

#include <iomanip>
#include <sstream>
#include <string>

namespace gemma4::text {

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

// A number with `digits` digits after the point: 0.9961.
inline std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// The text with &, <, > and " replaced by their entities: safe inside elements and quoted attributes.
inline std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace gemma4::text
