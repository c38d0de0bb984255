#include "bench/compare/bench_history_html.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "bench/compare/bench_comparison.h"
#include "bench/compare/svg.h"
#include "reference/files.h"
#include "reference/text.h"

namespace gemma4::bench {

using svg::line;
using svg::num;
using svg::text;
using text::xml_escape;
namespace {

const std::string kHistoryCss = std::string(svg::kPageCss) + R"(
td.slower { background: #fcc; }
td.faster { background: #cfc; }
.note { font-size: 12px; color: #555; margin: 0 0 0 1em; }
.swatch { display: inline-block; width: 1em; height: 0.7em; margin-right: 0.3em; }
)";

// Plot geometry of one chart, in SVG pixels: the tick labels hang below the plot at 45 degrees,
// the legend sits to its right.
// Two charts side by side fit a 1400-pixel window.
constexpr double kPlotWidth = 640, kPlotHeight = 340;
constexpr double kPlotLeft = 60, kPlotRight = 420, kPlotTop = 20, kPlotBottom = 215, kLegend = 436;

// The y axis of a chart: a speed counter when every point of it has one, else the median time.
enum class Axis { kTflops, kGbps, kMilliseconds };

struct AxisSpec {
  Axis axis;
  const char* counter;  // the kSpeedCounters name; "" for time
  const char* title;
  const char* ceiling;  // the benchmark whose same-run counter is drawn dashed beside a series
};

const AxisSpec kAxes[] = {
    {Axis::kTflops, "TFLOP/s", "TFLOP/s (higher is better)", "ceiling/gemm_bf16/cuda/8192"},
    {Axis::kGbps, "GB/s", "GB/s (higher is better)", "ceiling/d2d_copy/cuda/1GiB"},
    {Axis::kMilliseconds, "", "median time, ms (lower is better)", ""},
};

// One coloured curve: the runs of one GPU (kind and uuid), coloured by its order of first appearance
// in the whole history, so that a GPU keeps its colour from chart to chart.
struct Series {
  std::string label, gpu, uuid;
  size_t runs = 0;
};

struct Page {
  const std::vector<HistoryRun>& runs;  // date order: the x axis
  std::vector<Series> series;
  std::vector<size_t> series_of;  // per run
};

Page make_page(const std::vector<HistoryRun>& runs) {
  Page page{runs, {}, {}};
  std::map<std::string, size_t> index;
  for (const HistoryRun& run : runs) {
    auto [it, added] = index.emplace(run.series_key(), page.series.size());
    if (added) page.series.push_back({gpu_label(run), run.gpu, short_uuid(run), 0});
    page.series[it->second].runs++;
    page.series_of.push_back(it->second);
  }
  return page;
}

const HistoryResult* ran(const HistoryResult* r) {
  return r && !r->skipped() && std::isfinite(r->median_s) ? r : nullptr;
}

const AxisSpec& chart_axis(const Page& page, const std::string& name) {
  for (const AxisSpec& spec : kAxes) {
    if (spec.axis == Axis::kMilliseconds) return spec;
    bool any = false, every = true;
    for (const HistoryRun& run : page.runs) {
      if (const HistoryResult* r = ran(run.find(name))) {
        any = true;
        every = every && r->speed.count(spec.counter);
      }
    }
    if (any && every) return spec;
  }
  return kAxes[2];
}

double value(const HistoryResult& r, const AxisSpec& spec) {
  return spec.axis == Axis::kMilliseconds ? r.median_s * 1e3 : r.speed.at(spec.counter);
}

// The same run's ceiling on this axis; NaN where there is none (a time axis, a ceiling's own chart,
// a run without it).
double ceiling_of(const HistoryRun& run, const std::string& name, const AxisSpec& spec) {
  if (!*spec.ceiling || name.rfind("ceiling/", 0) == 0) return NAN;
  const HistoryResult* c = ran(run.find(spec.ceiling));
  return c && c->speed.count(spec.counter) ? c->speed.at(spec.counter) : NAN;
}

std::string tooltip(const HistoryRun& run, const std::string& what) {
  return "<title>" + xml_escape(gpu_label(run) + "\ncommit " + run.commit + ", " + run.date + "\n" + what + "\nlabel " +
                                run.label + ", driver " + run.nvidia_driver + ", torch " + run.torch) +
         "</title>";
}

std::string circle(double x, double y, double r, const std::string& stroke, const std::string& fill,
                   const std::string& title) {
  return "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\" stroke=\"" + stroke + "\" fill=\"" +
         fill + "\">" + title + "</circle>\n";
}

std::string polyline(const std::vector<std::pair<double, double>>& points, const std::string& colour,
                     const std::string& css_class, const std::string& extra) {
  std::string coordinates;
  for (const auto& [x, y] : points) coordinates += num(x) + "," + num(y) + " ";
  return "<polyline class=\"" + css_class + "\" fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2\"" + extra +
         " points=\"" + coordinates + "\"/>\n";
}

// The chart of one benchmark; `skipped` counts the runs where it was skipped (for the note under it).
std::string chart_svg(const Page& page, const std::string& name, size_t& skipped) {
  const AxisSpec& spec = chart_axis(page, name);
  const size_t n = page.runs.size();
  double top = 0;
  for (const HistoryRun& run : page.runs) {
    if (const HistoryResult* r = ran(run.find(name))) {
      top = std::max(top, value(*r, spec));
      const double c = ceiling_of(run, name, spec);
      if (std::isfinite(c)) top = std::max(top, c);
    }
  }
  if (!(top > 0) || !std::isfinite(top)) top = 1;
  const double step = svg::nice_step(top * 1.05);
  top = std::ceil(top * 1.05 / step) * step;
  const auto x_of = [&](size_t i) {
    return kPlotLeft + (static_cast<double>(i) + 0.5) / static_cast<double>(n) * (kPlotRight - kPlotLeft);
  };
  const auto y_of = [&](double v) { return kPlotBottom - v / top * (kPlotBottom - kPlotTop); };

  std::string out = svg::open(kPlotWidth, kPlotHeight) + svg::frame(kPlotLeft, kPlotTop, kPlotRight, kPlotBottom);
  for (double v = 0; v <= top * (1 + 1e-9); v += step) {
    out += line(kPlotLeft, y_of(v), kPlotRight, y_of(v), "stroke=\"#eee\"");
    out += text(kPlotLeft - 6, y_of(v) + 4, format_number(v), "text-anchor=\"end\"");
  }
  out += svg::y_title(16, (kPlotTop + kPlotBottom) / 2, spec.title);
  // A label on every run while they fit (about 14 px apart at 45 degrees), else on every k-th.
  const size_t every = std::max<size_t>(1, static_cast<size_t>(std::ceil(static_cast<double>(n) / 28)));
  for (size_t i = 0; i < n; ++i) {
    out += line(x_of(i), kPlotBottom, x_of(i), kPlotBottom + 4, "stroke=\"#888\"");
    if (i % every) continue;
    const double x = x_of(i) - 3, y = kPlotBottom + 12;
    out += text(x, y, short_commit(page.runs[i].commit) + " " + page.runs[i].date.substr(0, 10),
                "font-size=\"10\" transform=\"rotate(45 " + num(x) + " " + num(y) + ")\"");
  }

  double legend_y = kPlotTop + 8;
  bool any_ceiling = false, any_ran = false;
  skipped = 0;
  for (size_t s = 0; s < page.series.size(); ++s) {
    const std::string colour = svg::colour(s);
    std::vector<std::pair<double, double>> points, ceilings;
    std::string markers;
    bool present = false;
    for (size_t i = 0; i < n; ++i) {
      const HistoryRun& run = page.runs[i];
      const HistoryResult* r = page.series_of[i] == s ? run.find(name) : nullptr;
      if (!r) continue;
      present = true;
      if (!ran(r)) {  // hollow, on the axis: it has no value, and the reason is in its tooltip
        ++skipped;
        markers += circle(x_of(i), kPlotBottom, 4, colour, "white",
                          tooltip(run, "skipped: " + (r->skipped() ? r->skip_reason : std::string("no median"))));
        continue;
      }
      any_ran = true;
      const double v = value(*r, spec);
      points.emplace_back(x_of(i), y_of(v));
      std::string what = "median " + format_seconds(r->median_s);
      for (const auto& [counter, speed] : r->speed) what += ", " + format_number(speed) + " " + counter;
      markers += circle(x_of(i), y_of(v), 3, colour, colour, tooltip(run, what));
      const double c = ceiling_of(run, name, spec);
      if (std::isfinite(c)) {
        ceilings.emplace_back(x_of(i), y_of(c));
        markers += circle(x_of(i), y_of(c), 2, colour, colour,
                          tooltip(run, std::string(spec.ceiling) + ": " + format_number(c) + " " + spec.counter));
      }
    }
    if (!present) continue;
    out += polyline(points, colour, "series", "");
    if (!ceilings.empty()) {
      out += polyline(ceilings, colour, "ceiling", " stroke-dasharray=\"6 4\" stroke-opacity=\"0.7\"");
      any_ceiling = true;
    }
    out += markers;
    out += line(kLegend, legend_y, kLegend + 24, legend_y, "stroke=\"" + colour + "\" stroke-width=\"2\"");
    out += text(kLegend + 30, legend_y + 4, page.series[s].gpu);
    out += text(kLegend + 30, legend_y + 17, page.series[s].uuid, "fill=\"#555\"");
    legend_y += 36;
  }
  if (any_ceiling) {
    out +=
        line(kLegend, legend_y, kLegend + 24, legend_y, "stroke=\"#555\" stroke-width=\"2\" stroke-dasharray=\"6 4\"");
    out += text(kLegend + 30, legend_y + 4, "dashed: the same run's ceiling");
    out += text(kLegend + 30, legend_y + 17, std::string("(") + spec.ceiling + ")", "fill=\"#555\" font-size=\"9\"");
    legend_y += 36;
  }
  if (!any_ran) {
    out += text((kPlotLeft + kPlotRight) / 2, (kPlotTop + kPlotBottom) / 2, "skipped in every run",
                "text-anchor=\"middle\" fill=\"#888\"");
  }
  if (skipped) {
    out += circle(kLegend + 12, legend_y, 4, "#555", "white", "");
    out += text(kLegend + 30, legend_y + 4, "skipped (why: its tooltip)");
  }
  return out + "</svg>\n";
}

std::string percent_cell(double change) {
  const char* css = change > 5 ? " slower" : change < -5 ? " faster" : "";
  return "<td class=\"num" + std::string(css) + "\">" + format_percent(change) + "</td>";
}

// Per benchmark and GPU: the first and the latest median recorded, and the change of time between them.
std::string summary_table(const Page& page, const std::vector<std::string>& names) {
  std::string html =
      "<table>\n<tr><th>benchmark</th><th>GPU</th><th>first median</th><th>run</th><th>latest median</th>"
      "<th>run</th><th>change of time</th></tr>\n";
  for (const std::string& name : names) {
    for (size_t s = 0; s < page.series.size(); ++s) {
      const HistoryRun *first = nullptr, *latest = nullptr;
      bool recorded = false;
      for (size_t i = 0; i < page.runs.size(); ++i) {
        if (page.series_of[i] != s) continue;
        const HistoryResult* r = page.runs[i].find(name);
        recorded = recorded || r;
        if (!ran(r)) continue;
        if (!first) first = &page.runs[i];
        latest = &page.runs[i];
      }
      if (!recorded) continue;
      const auto cell = [&](const HistoryRun* run) {
        if (!run) return std::string("<td>skipped</td>");
        return "<td class=\"num\">" + format_seconds(run->find(name)->median_s) + "</td><td>" +
               xml_escape(short_commit(run->commit) + " " + run->date.substr(0, 10)) + "</td>";
      };
      const double change = first && latest != first
                                ? (latest->find(name)->median_s / first->find(name)->median_s - 1) * 100
                                : NAN;
      html += "<tr><td>" + xml_escape(name) + "</td><td><span class=\"swatch\" style=\"background:" + svg::colour(s) +
              "\"></span>" + xml_escape(page.series[s].label) + "</td>" + cell(first) + (first ? "" : "<td></td>") +
              cell(latest) + (latest ? "" : "<td></td>") + percent_cell(change) + "</tr>\n";
    }
  }
  return html + "</table>\n";
}

std::string header(const Page& page, const std::string& history_path, size_t charts, const std::string& filter_text) {
  std::set<std::string> commits;
  for (const HistoryRun& run : page.runs) commits.insert(run.commit);
  std::string html = "<h1>Benchmark history</h1>\n<p>" + std::to_string(page.runs.size()) + " runs of " +
                     std::to_string(commits.size()) + " commits on " + std::to_string(page.series.size()) +
                     " GPUs, from <code>" + xml_escape(history_path) + "</code>";
  if (!page.runs.empty()) {
    html += ", " + xml_escape(page.runs.front().date.substr(0, 10)) + " to " +
            xml_escape(page.runs.back().date.substr(0, 10));
  }
  html += "; " + std::to_string(charts) + " benchmarks" +
          (filter_text.empty() ? "" : " matching <code>" + xml_escape(filter_text) + "</code>") + ".</p>\n<ul>\n";
  for (size_t s = 0; s < page.series.size(); ++s) {
    html += "<li><span class=\"swatch\" style=\"background:" + std::string(svg::colour(s)) + "\"></span>" +
            xml_escape(page.series[s].label) + ": " + std::to_string(page.series[s].runs) + " runs</li>\n";
  }
  return html +
         "</ul>\n<p>Each chart: the runs in date order (short commit and day), one series per GPU. Speeds are "
         "medians of the counters gemma4-bench computes from the FLOP and byte model of bench/README.md; "
         "dashed beside a TFLOP/s series, the same run's ceiling/gemm_bf16/cuda/8192, beside a GB/s series its "
         "ceiling/d2d_copy/cuda/1GiB. A benchmark without counters is drawn as its median time. The table: "
         "the change of median time from the first run to the latest (negative is faster; single medians, "
         "no test: bench-compare judges two runs).</p>\n";
}

}  // namespace

void write_history_html(const std::string& path, const std::string& history_path, const std::vector<HistoryRun>& runs,
                        const std::regex* filter, const std::string& filter_text) {
  const Page page = make_page(runs);
  const std::vector<std::string> names = benchmark_names(runs, filter);
  std::string html = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>bench-history</title><style>" +
                     kHistoryCss + "</style></head><body>\n" + header(page, history_path, names.size(), filter_text);
  html += summary_table(page, names);
  if (!names.empty()) html += "<h2>Charts</h2>\n";
  for (const std::string& name : names) {
    size_t skipped = 0;
    const std::string chart = chart_svg(page, name, skipped);
    html += "<div class=\"chart\" data-benchmark=\"" + xml_escape(name) + "\"><h3>" + xml_escape(name) + "</h3>\n" +
            chart;
    if (skipped) {
      html += "<p class=\"note\">skipped in " + std::to_string(skipped) +
              " runs: hollow markers on the axis, the reason in their tooltips</p>\n";
    }
    html += "</div>\n";
  }
  html += "</body></html>\n";
  files::write_text(path, html);
}

}  // namespace gemma4::bench
