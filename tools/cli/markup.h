// Escaping for the XML and HTML the CLI writes (calibrate's JUnit report, bench-compare's HTML).
#pragma once

#include <string>

namespace gemma4::cli {

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

}  // namespace gemma4::cli
