#include "bench/compare/bench_report_html.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "bench/compare/svg.h"
#include "reference/files.h"
#include "reference/text.h"

namespace gemma4::bench {

using svg::line;
using svg::num;
using svg::text;
using text::xml_escape;
namespace {

const std::string kCss = std::string(svg::kPageCss) + R"(
tr.regression td { background: #fcc; font-weight: bold; }
tr.faster td { background: #cfc; }
)";

// Plot geometry of one chart, in SVG pixels.
constexpr double kWidth = 720, kHeight = 320;
constexpr double kLeft = 70, kRight = 540, kTop = 20, kBottom = 270;

std::vector<std::string> split(const std::string& name) {
  std::vector<std::string> fields;
  std::stringstream in(name);
  for (std::string f; std::getline(in, f, '/');) fields.push_back(f);
  return fields;
}

// One benchmark's place in a chart: its backend and S, and each side's result where it ran.
struct Entry {
  std::string backend;
  long long s = 0;
  const BenchmarkResult* base = nullptr;
  const BenchmarkResult* current = nullptr;
};

struct Chart {
  std::string title;  // "op · geometry · dtype · direction · device"
  std::vector<Entry> entries;
  std::string metric;  // a kSpeedCounters name, or "1/s"
};

const BenchmarkResult* ran(const BenchmarkResult* r) {
  return r && !r->skipped() && std::isfinite(r->median_seconds) && r->median_seconds > 0 ? r : nullptr;
}

// The first of kSpeedCounters that every benchmark of the chart has, else 1 / time.
std::string chart_metric(const Chart& chart) {
  for (const std::string& counter : kSpeedCounters) {
    bool everywhere = true;
    for (const Entry& e : chart.entries) {
      for (const BenchmarkResult* r : {e.base, e.current}) {
        if (r && !r->speed.count(counter)) everywhere = false;
      }
    }
    if (everywhere) return counter;
  }
  return "1/s";
}

double speed(const BenchmarkResult& r, const std::string& metric) {
  return metric == "1/s" ? 1 / r.median_seconds : r.speed.at(metric);
}

// Names op/backend/device/geometry/S/dtype/direction[/...] with a positive integer S, grouped by
// everything but backend and S, in order of first appearance.
std::vector<Chart> build_charts(const std::vector<Comparison>& rows) {
  std::vector<Chart> charts;
  std::map<std::string, size_t> index;
  for (const Comparison& c : rows) {
    const std::vector<std::string> f = split(c.name);
    if (f.size() < 7 || f[4].empty() || f[4].size() > 12 || f[4].find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    Entry e{f[1], std::stoll(f[4]), ran(c.base), ran(c.current)};
    if (e.s <= 0 || (!e.base && !e.current)) continue;
    const std::string title = f[0] + " · " + f[3] + " · " + f[5] + " · " + f[6] + " · " + f[2];
    auto [it, added] = index.emplace(title, charts.size());
    if (added) charts.push_back({title, {}, ""});
    charts[it->second].entries.push_back(e);
  }
  for (Chart& chart : charts) chart.metric = chart_metric(chart);
  return charts;
}

std::string svg_chart(const Chart& chart) {
  // Axes ranges: x over log2 S of every point (padded, so no point sits on the frame), y from 0.
  double lo = INFINITY, hi = -INFINITY, top = 0;
  std::vector<long long> sizes;
  std::vector<std::string> backends;
  for (const Entry& e : chart.entries) {
    lo = std::min(lo, std::log2(static_cast<double>(e.s)));
    hi = std::max(hi, std::log2(static_cast<double>(e.s)));
    if (std::find(sizes.begin(), sizes.end(), e.s) == sizes.end()) sizes.push_back(e.s);
    if (std::find(backends.begin(), backends.end(), e.backend) == backends.end()) backends.push_back(e.backend);
    for (const BenchmarkResult* r : {e.base, e.current}) {
      if (r) top = std::max(top, speed(*r, chart.metric));
    }
  }
  lo -= 0.3;
  hi += 0.3;
  if (!(top > 0) || !std::isfinite(top)) top = 1;
  const double step = svg::nice_step(top * 1.05);
  top = std::ceil(top * 1.05 / step) * step;
  const auto x_of = [&](long long s) {
    return kLeft + (std::log2(static_cast<double>(s)) - lo) / (hi - lo) * (kRight - kLeft);
  };
  const auto y_of = [&](double v) { return kBottom - v / top * (kBottom - kTop); };

  std::string svg = svg::open(kWidth, kHeight) + svg::frame(kLeft, kTop, kRight, kBottom);
  for (double v = 0; v <= top * (1 + 1e-9); v += step) {
    svg += line(kLeft, y_of(v), kRight, y_of(v), "stroke=\"#eee\"");
    svg += text(kLeft - 6, y_of(v) + 4, format_number(v), "text-anchor=\"end\"");
  }
  std::sort(sizes.begin(), sizes.end());
  for (long long s : sizes) {
    svg += line(x_of(s), kBottom, x_of(s), kBottom + 5, "stroke=\"#888\"");
    svg += text(x_of(s), kBottom + 17, std::to_string(s), "text-anchor=\"middle\"");
  }
  svg += text((kLeft + kRight) / 2, kBottom + 38, "S (log2 scale)", "text-anchor=\"middle\"");
  svg += svg::y_title(16, (kTop + kBottom) / 2, chart.metric);

  for (size_t b = 0; b < backends.size(); ++b) {
    const std::string colour = svg::colour(b);
    for (const bool is_base : {true, false}) {
      std::vector<std::pair<long long, double>> points;
      for (const Entry& e : chart.entries) {
        const BenchmarkResult* r = is_base ? e.base : e.current;
        if (e.backend == backends[b] && r) points.emplace_back(e.s, speed(*r, chart.metric));
      }
      std::sort(points.begin(), points.end());
      std::string coordinates;
      for (const auto& [s, v] : points) coordinates += num(x_of(s)) + "," + num(y_of(v)) + " ";
      svg += "<polyline fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2\"" +
             (is_base ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + coordinates + "\"/>\n";
      for (const auto& [s, v] : points) {
        svg += "<circle cx=\"" + num(x_of(s)) + "\" cy=\"" + num(y_of(v)) + "\" r=\"3\" stroke=\"" + colour +
               "\" fill=\"" + (is_base ? "white" : colour) + "\"><title>" + xml_escape(backends[b]) +
               (is_base ? " base" : " new") + ", S " + std::to_string(s) + ": " + format_number(v) + " " +
               xml_escape(chart.metric) + "</title></circle>\n";
      }
    }
    const double y = kTop + 10 + 18 * static_cast<double>(b);
    svg += line(kRight + 20, y, kRight + 50, y, "stroke=\"" + colour + "\" stroke-width=\"2\"");
    svg += text(kRight + 56, y + 4, backends[b]);
  }
  const double y = kTop + 10 + 18 * static_cast<double>(backends.size()) + 10;
  svg += line(kRight + 20, y, kRight + 50, y, "stroke=\"#555\" stroke-width=\"2\"");
  svg += text(kRight + 56, y + 4, "new");
  svg += line(kRight + 20, y + 18, kRight + 50, y + 18, "stroke=\"#555\" stroke-width=\"2\" stroke-dasharray=\"6 4\"");
  svg += text(kRight + 56, y + 22, "base");
  return svg + "</svg>\n";
}

std::string css_class(Verdict v) {
  std::string name = verdict_name(v);
  std::replace(name.begin(), name.end(), ' ', '-');
  return name;
}

std::string table(const std::vector<Comparison>& rows) {
  std::string html =
      "<table>\n<tr><th>benchmark</th><th>base median</th><th>new median</th><th>change</th><th>p</th>"
      "<th>verdict</th></tr>\n";
  for (const Comparison& c : rows) {
    const double base = c.base ? c.base->median_seconds : NAN, current = c.current ? c.current->median_seconds : NAN;
    html += "<tr class=\"" + css_class(c.verdict) + "\"><td>" + xml_escape(c.name) + "</td><td class=\"num\">" +
            format_seconds(base) + "</td><td class=\"num\">" + format_seconds(current) + "</td><td class=\"num\">" +
            format_percent(c.change_percent) + "</td><td class=\"num\">" + format_p(c.p) + "</td><td>" +
            verdict_name(c.verdict) + (c.note.empty() ? "" : " (" + xml_escape(c.note) + ")") + "</td></tr>\n";
  }
  return html + "</table>\n";
}

std::string describe(const char* role, const BenchReport& r) {
  std::string text = std::string("<li>") + role + ": <code>" + xml_escape(r.path) + "</code>";
  for (const char* key : {"gpu", "host_name", "git_sha", "torch", "date"}) {
    auto it = r.context.find(key);
    if (it != r.context.end()) text += ", " + std::string(key) + " " + xml_escape(it->second);
  }
  return text + "</li>\n";
}

}  // namespace

void write_html_report(const std::string& path, const BenchReport& base, const BenchReport& current,
                       const std::vector<Comparison>& rows, const std::vector<std::string>& warnings,
                       const CompareOptions& options) {
  std::string html = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>bench-compare</title><style>" +
                     std::string(kCss) + "</style></head><body>\n<h1>bench-compare</h1>\n<ul>\n" +
                     describe("base", base) + describe("new", current) + "</ul>\n";
  html += "<p>" + verdict_counts(rows) + " (regression: median slower by more than " +
          format_number(options.threshold_percent) + "% and one-sided Mann-Whitney p &lt; " +
          format_number(options.alpha) + ", at least " + std::to_string(options.min_repetitions) +
          " repetitions on each side)</p>\n";
  if (!warnings.empty()) {
    html += "<ul class=\"warnings\">\n";
    for (const std::string& w : warnings) html += "<li>warning: " + xml_escape(w) + "</li>\n";
    html += "</ul>\n";
  }
  html += table(rows);
  const std::vector<Chart> charts = build_charts(rows);
  if (!charts.empty()) html += "<h2>Speed against S</h2>\n";
  for (const Chart& chart : charts) {
    html += "<div class=\"chart\"><h3>" + xml_escape(chart.title) + "</h3>\n" + svg_chart(chart) + "</div>\n";
  }
  html += "</body></html>\n";
  files::write_text(path, html);
}

}  // namespace gemma4::bench
