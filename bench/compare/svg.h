#pragma once
// The pieces the self-contained HTML reports (bench-compare --html, bench-history html) share: the
// palette, the page style, SVG primitives and the axis step. Inline SVG and CSS only, no scripts
// and no external resources, so that a report opens from a CI artefact or a git checkout as is.
#include <cmath>
#include <sstream>
#include <string>

#include "reference/text.h"

namespace gemma4::bench::svg {

// One colour per curve (a backend, a GPU), in order of first appearance.
inline const char* colour(size_t i) {
  static const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                         "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  return kColours[i % (sizeof kColours / sizeof *kColours)];
}

// The style both pages start from; each appends its own rules.
inline const char* const kPageCss = R"(
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: left; }
td.num { text-align: right; font-family: monospace; }
.warnings { color: #a40; }
.chart { display: inline-block; margin: 1em 1em 0 0; vertical-align: top; }
.chart h3 { font-size: 14px; margin: 0; }
)";

// A coordinate with one decimal: finer than a pixel is noise in the file.
inline std::string num(double v) {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << v;
  return s.str();
}

inline std::string line(double x1, double y1, double x2, double y2, const std::string& style) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\" " +
         style + "/>\n";
}

inline std::string text(double x, double y, const std::string& s, const std::string& attributes = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" " + attributes + ">" + gemma4::text::xml_escape(s) +
         "</text>\n";
}

inline std::string open(double width, double height) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
         "\" font-size=\"11\" font-family=\"sans-serif\">\n";
}

// The plot area's frame.
inline std::string frame(double left, double top, double right, double bottom) {
  return "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(right - left) + "\" height=\"" +
         num(bottom - top) + "\" fill=\"none\" stroke=\"#888\"/>\n";
}

// A y axis title, written bottom to top beside the axis.
inline std::string y_title(double x, double y, const std::string& s) {
  return text(x, y, s, "text-anchor=\"middle\" transform=\"rotate(-90 " + num(x) + " " + num(y) + ")\"");
}

// A step of 1, 2 or 5 x 10^k that cuts [0, top] into about four parts.
inline double nice_step(double top) {
  const double raw = top / 4, magnitude = std::pow(10, std::floor(std::log10(raw))), fraction = raw / magnitude;
  return (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * magnitude;
}

}  // namespace gemma4::bench::svg
