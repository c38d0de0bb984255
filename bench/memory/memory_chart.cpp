// memory report --svg: the stack's measured bytes against tokens (decode: batch) per geometry and
// phase, with the estimate and the estimate x safety factor, in one self-contained SVG.
#include <algorithm>
#include <cmath>
#include <fstream>

#include "bench/memory/memory_format.h"
#include "bench/memory/memory_report.h"
#include "reference/error.h"
#include "reference/text.h"

namespace gemma4::memory {

using text::xml_escape;
namespace {

using format::fmt;
using format::gib;
using format::index_in;

// ---- SVG. Style as bench-compare's HTML charts (bench/compare/bench_report_html.cpp): its palette,
// sans-serif 11 px, grey frame, light grid, log2 x axis; here small multiples on one page.

const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
const char* const kFlatColour = "#2ca02c";
constexpr double kPanelWidth = 330, kPanelHeight = 250, kLegendHeight = 64;
constexpr double kLeft = 58, kRight = 296, kTop = 30, kBottom = 200;  // the plot inside a panel

std::string num(double v) { return fmt("%.1f", v); }

std::string svg_line(double x1, double y1, double x2, double y2, const std::string& style) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\" " + style +
         "/>\n";
}

std::string svg_text(double x, double y, const std::string& s, const std::string& attributes = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" " + attributes + ">" + xml_escape(s) + "</text>\n";
}

// reference first, cuda second, any other backend after: the same colour in every panel.
std::string colour_of(const std::string& backend, const std::vector<std::string>& backends) {
  const size_t i = std::find(backends.begin(), backends.end(), backend) - backends.begin();
  return kColours[i % (sizeof kColours / sizeof *kColours)];
}

std::string tokens_label(int64_t t) {
  return t >= 1024 && t % 1024 == 0 ? std::to_string(t / 1024) + "k" : std::to_string(t);
}

// One panel at (x0, y0): the stack points of one geometry and phase.
std::string svg_panel(double x0, double y0, const std::string& title, Phase phase,
                      const std::vector<MemoryPoint>& points, double factor, const std::vector<std::string>& backends) {
  std::string svg = "<g transform=\"translate(" + num(x0) + " " + num(y0) + ")\">\n";
  svg += svg_text((kLeft + kRight) / 2, 16, title, "text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\"");
  svg += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(kRight - kLeft) + "\" height=\"" +
         num(kBottom - kTop) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  if (points.empty())
    return svg +
           svg_text((kLeft + kRight) / 2, (kTop + kBottom) / 2, "not measured",
                    "text-anchor=\"middle\" fill=\"#888\"") +
           "</g>\n";
  const bool serving = phase == Phase::kPrefill || phase == Phase::kDecode;
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  std::vector<int64_t> xs;
  for (const MemoryPoint& p : points) {
    xlo = std::min(xlo, std::log2(double(p.tokens)));
    xhi = std::max(xhi, std::log2(double(p.tokens)));
    index_in(xs, p.tokens);
    for (double b : {p.measured_bytes, p.estimate_bytes, p.estimate_bytes * std::max(factor, 1.0)}) {
      ylo = std::min(ylo, std::log10(b / kGiB));
      yhi = std::max(yhi, std::log10(b / kGiB));
    }
  }
  if (serving) yhi = std::max(yhi, std::log10(15.0)), ylo = std::min(ylo, std::log10(15.0));
  xlo -= 0.4, xhi += 0.4, ylo -= 0.1, yhi += 0.1;
  if (yhi - ylo < 0.5) ylo -= 0.25, yhi += 0.25;
  const auto x_of = [&](int64_t t) { return kLeft + (std::log2(double(t)) - xlo) / (xhi - xlo) * (kRight - kLeft); };
  const auto y_of = [&](double bytes) {
    return kBottom - (std::log10(bytes / kGiB) - ylo) / (yhi - ylo) * (kBottom - kTop);
  };

  // y ticks at the powers of ten, with 2 and 5 between them when the panel spans under two decades.
  const bool fine = yhi - ylo < 2;
  for (int k = int(std::floor(ylo)); k <= int(std::ceil(yhi)); ++k) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, k), lv = std::log10(v);
      if ((m != 1 && !fine) || lv < ylo || lv > yhi) continue;
      svg += svg_line(kLeft, y_of(v * kGiB), kRight, y_of(v * kGiB), "stroke=\"#eee\"");
      svg += svg_text(kLeft - 5, y_of(v * kGiB) + 4, fmt("%g", v), "text-anchor=\"end\"");
    }
  }
  std::sort(xs.begin(), xs.end());
  double last_label = -INFINITY;  // skip labels that would overlap their left neighbour
  for (int64_t t : xs) {
    svg += svg_line(x_of(t), kBottom, x_of(t), kBottom + 4, "stroke=\"#888\"");
    if (x_of(t) - last_label < 26) continue;
    svg += svg_text(x_of(t), kBottom + 15, tokens_label(t), "text-anchor=\"middle\"");
    last_label = x_of(t);
  }
  svg += svg_text((kLeft + kRight) / 2, kBottom + 32, phase == Phase::kDecode ? "batch (log2)" : "tokens (log2)",
                  "text-anchor=\"middle\"");
  svg += svg_text(14, (kTop + kBottom) / 2, "GiB (log10)",
                  "text-anchor=\"middle\" transform=\"rotate(-90 14 " + num((kTop + kBottom) / 2) + ")\"");
  if (serving) {
    // Labelled at the left, where the curves are lowest; below the line where the frame would cut it.
    const double y = y_of(15 * kGiB);
    svg += svg_line(kLeft, y, kRight, y, "stroke=\"" + std::string(kFlatColour) + "\"");
    svg +=
        svg_text(kLeft + 3, y - kTop < 14 ? y + 12 : y - 3, "flat 15 GiB", "fill=\"" + std::string(kFlatColour) + "\"");
  }

  // A series: one backend at one batch (decode: one context) over tokens. A backend with several
  // series in the panel gets each one labelled at its last point.
  std::vector<std::tuple<std::string, int64_t, int64_t>> series;
  for (const MemoryPoint& p : points) index_in(series, {p.backend, phase == Phase::kDecode ? 0 : p.batch, p.context});
  for (const auto& [backend, batch, context] : series) {
    const std::string colour = colour_of(backend, backends);
    std::vector<const MemoryPoint*> in;
    for (const MemoryPoint& p : points) {
      if (p.backend == backend && (phase == Phase::kDecode || p.batch == batch) && p.context == context)
        in.push_back(&p);
    }
    std::sort(in.begin(), in.end(), [](const MemoryPoint* a, const MemoryPoint* b) { return a->tokens < b->tokens; });
    // The measured points (scale 0), the estimate (1) or estimate x factor through the series' points.
    const auto polyline = [&](double scale, const std::string& style) {
      std::string xy;
      for (const MemoryPoint* p : in) {
        xy += num(x_of(p->tokens)) + "," + num(y_of(scale ? p->estimate_bytes * scale : p->measured_bytes)) + " ";
      }
      return "<polyline fill=\"none\" " + style + " points=\"" + xy + "\"/>\n";
    };
    if (factor > 0) svg += polyline(factor, "stroke=\"#999\" stroke-width=\"1\" stroke-dasharray=\"1 3\"");
    svg += polyline(1, "stroke=\"" + colour + "\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"");
    svg += polyline(0, "stroke=\"" + colour + "\" stroke-width=\"2\"");
    for (const MemoryPoint* p : in) {
      svg += "<circle cx=\"" + num(x_of(p->tokens)) + "\" cy=\"" + num(y_of(p->measured_bytes)) + "\" r=\"3\" fill=\"" +
             colour + "\"><title>" + xml_escape(p->name()) + ": measured " + gib(p->measured_bytes) +
             " GiB, estimate " + gib(p->estimate_bytes) + " GiB</title></circle>\n";
    }
    const size_t of_backend =
        std::count_if(series.begin(), series.end(), [&](const auto& s) { return std::get<0>(s) == backend; });
    if (of_backend > 1) {
      svg += svg_text(x_of(in.back()->tokens) + 4, y_of(in.back()->measured_bytes) - 4,
                      phase == Phase::kDecode ? "C=" + tokens_label(context) : "B=" + std::to_string(batch),
                      "font-size=\"9\" fill=\"" + colour + "\"");
    }
  }
  return svg + "</g>\n";
}

// The legend strip above the panels: one sample of each line kind.
std::string svg_legend(const MemoryFile& file, const std::vector<std::string>& backends) {
  std::string svg =
      svg_text(10, 20, "activation memory, part stack: " + file.device + ", " + file.dtype + " (1 GiB = 2^30 bytes)",
               "font-size=\"14\" font-weight=\"bold\"");
  double x = 10;
  const auto entry = [&](const std::string& style, const std::string& label) {
    svg += svg_line(x, 44, x + 30, 44, style);
    svg += svg_text(x + 36, 48, label);
    x += 56 + 6.4 * double(label.size());
  };
  for (const std::string& b : backends)
    entry("stroke=\"" + colour_of(b, backends) + "\" stroke-width=\"2\"", b + " measured");
  entry("stroke=\"#555\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"", "estimate (backend's colour)");
  entry("stroke=\"#999\" stroke-width=\"1\" stroke-dasharray=\"1 3\"",
        "estimate x safety factor " + fmt("%.2f", file.safety_factor));
  entry("stroke=\"" + std::string(kFlatColour) + "\"", "flat 15 GiB (modular's planner, serving panels)");
  return svg;
}

}  // namespace

void write_memory_svg(const std::string& path, const MemoryFile& file) {
  std::vector<std::string> geometries, backends = {"reference", "cuda"};
  for (const MemoryPoint& p : file.points) {
    if (p.part != Part::kStack) continue;
    index_in(geometries, p.geometry);
    index_in(backends, p.backend);
  }
  const std::vector<Phase>& phases = all_phases();
  const double width = kPanelWidth * double(phases.size()) + 20;
  const double height = kLegendHeight + kPanelHeight * double(std::max<size_t>(geometries.size(), 1)) + 10;
  std::string svg =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
      "\" font-size=\"11\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += svg_legend(file, backends);
  for (size_t g = 0; g < geometries.size(); ++g) {
    for (size_t f = 0; f < phases.size(); ++f) {
      std::vector<MemoryPoint> points;
      for (const MemoryPoint& p : file.points) {
        if (p.part == Part::kStack && p.geometry == geometries[g] && p.phase == phases[f]) points.push_back(p);
      }
      svg += svg_panel(10 + kPanelWidth * double(f), kLegendHeight + kPanelHeight * double(g),
                       geometries[g] + " · " + phase_name(phases[f]), phases[f], points, file.safety_factor,
                       backends);
    }
  }
  std::ofstream out(path);
  out << svg << "</svg>\n";
  if (!out.flush()) throw Error(path + ": cannot be written");
}

}  // namespace gemma4::memory
