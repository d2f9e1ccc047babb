#pragma once
// Small SVG charts for the HTML report: grouped, stacked bar charts and line/marker charts
// with axes, ticks, labels, a legend and hover titles. Output is one standalone <svg>
// element (xmlns set, styles as attributes) that works inline in HTML or as a .svg file.
// Pure string building; no fonts are measured, so text sizes are chosen to fit by layout.
#include <string>
#include <string_view>
#include <vector>

namespace adaptiveload {

// One stacked part of a bar, drawn bottom-up in the order given.
struct SvgSegment {
  double value = 0;
  std::string color;
};

// One bar: rendered as <g class="{bar_class}" data-group=".." data-bar=".."> with a <title>
// and one <rect> per non-zero segment.
struct SvgBar {
  std::vector<SvgSegment> segments;
  std::string title;  // hover text
  // A whisker from range_lo to range_hi (y values) across the bar, e.g. the spread of the
  // values a bar's mean stands for; drawn only when range_hi > range_lo.
  double range_lo = 0, range_hi = 0;
};

struct SvgBarGroup {
  std::string label;  // x-axis label of the group
  std::vector<SvgBar> bars;
};

struct SvgLegendItem {
  std::string name, color;
  bool marker = false;  // a dot (line charts' markers) instead of a square
  bool line = false;    // a short stroke (line charts' curves) instead of a square
};

struct SvgBarChart {
  std::string id;        // the <svg> element's id
  std::string title;     // drawn at the top
  std::string subtitle;  // smaller, under the title
  std::string x_label, y_label;
  std::vector<SvgLegendItem> legend;
  std::vector<SvgBarGroup> groups;
  std::string bar_class = "bar";
  int width = 1200, height = 360;
  double y_max = 0;               // 0: from the data
  bool rotate_labels = false;     // slanted x labels for long names
  bool group_separators = false;  // faint lines between groups
};

struct SvgLineSeries {
  std::string name, color;
  std::vector<double> x, y;
  bool line = true;                 // a polyline through the points
  bool markers = false;             // a circle at each point
  std::vector<std::string> titles;  // hover text per point (markers only)
  std::string point_class = "point";
};

struct SvgLineChart {
  std::string id, title, subtitle, x_label, y_label;
  std::vector<SvgLineSeries> series;
  bool log_x = false, log_y = false;
  int width = 1200, height = 420;
};

std::string render_bar_chart(const SvgBarChart& chart);
std::string render_line_chart(const SvgLineChart& chart);

// Helpers, public for the report and tests.
std::string xml_escape(std::string_view s);
// Round tick positions covering [lo, hi]: about `target` steps of 1, 2 or 5 x 10^k.
std::vector<double> linear_ticks(double lo, double hi, int target);
// Ticks of a log axis over [lo, hi] (lo > 0): 1-2-5 per decade, only decades past 4 decades.
std::vector<double> log_ticks(double lo, double hi);
// Short tick text: 1.5K, 32.8K, 2M, 0.25, 3e-05.
std::string tick_label(double v);

}  // namespace adaptiveload
