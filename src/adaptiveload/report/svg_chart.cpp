#include "adaptiveload/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace adaptiveload {
namespace {

constexpr const char* kAxisColor = "#444";
constexpr const char* kGridColor = "#e3e3e3";
constexpr const char* kTextColor = "#222";

// Coordinates with one decimal keep the files small and the rendering exact enough.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  std::string s = buf;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  if (s == "-0") s = "0";
  return s;
}

struct Frame {
  double left, top, width, height;  // the plot area in pixels
  double right() const { return left + width; }
  double bottom() const { return top + height; }
};

void open_svg(std::ostringstream& o, const std::string& id, int w, int h) {
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\"";
  if (!id.empty()) o << " id=\"" << xml_escape(id) << "\"";
  o << " width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << " " << h
    << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\" fill=\"" << kTextColor
    << "\">\n";
  o << "<rect width=\"" << w << "\" height=\"" << h << "\" fill=\"#fff\"/>\n";
}

void text(std::ostringstream& o, double x, double y, const std::string& s,
          const char* anchor = "start", int size = 0, const char* extra = "") {
  o << "<text x=\"" << num(x) << "\" y=\"" << num(y) << "\"";
  if (std::string(anchor) != "start") o << " text-anchor=\"" << anchor << "\"";
  if (size) o << " font-size=\"" << size << "\"";
  o << extra << ">" << xml_escape(s) << "</text>\n";
}

void titles(std::ostringstream& o, const std::string& title, const std::string& subtitle) {
  if (!title.empty()) text(o, 12, 20, title, "start", 15, " font-weight=\"bold\"");
  if (!subtitle.empty()) text(o, 12, 37, subtitle, "start", 12, " fill=\"#555\"");
}

// Legend, right-aligned on the title line; item widths estimated at 6.5 px per character.
void legend(std::ostringstream& o, const std::vector<SvgLegendItem>& items, int width) {
  double x = width - 12;
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    const double w = 18 + 6.5 * double(it->name.size());
    x -= w;
    if (it->line)
      o << "<line x1=\"" << num(x - 2) << "\" x2=\"" << num(x + 11)
        << "\" y1=\"15\" y2=\"15\" stroke=\"" << it->color << "\" stroke-width=\"2.5\"/>\n";
    else if (it->marker)
      o << "<circle cx=\"" << num(x + 5) << "\" cy=\"15\" r=\"4.5\" fill=\"" << it->color
        << "\"/>\n";
    else
      o << "<rect x=\"" << num(x) << "\" y=\"10\" width=\"10\" height=\"10\" fill=\"" << it->color
        << "\"/>\n";
    text(o, x + 14, 19.5, it->name, "start", 12);
    x -= 12;
  }
}

void y_axis(std::ostringstream& o, const Frame& f, const std::vector<double>& ticks, double lo,
            double hi, bool log, const std::string& label) {
  auto y_of = [&](double v) {
    double a = log ? std::log10(v) : v, l = log ? std::log10(lo) : lo,
           h = log ? std::log10(hi) : hi;
    return f.bottom() - (a - l) / (h - l) * f.height;
  };
  for (double t : ticks) {
    const double y = y_of(t);
    o << "<line x1=\"" << num(f.left) << "\" x2=\"" << num(f.right()) << "\" y1=\"" << num(y)
      << "\" y2=\"" << num(y) << "\" stroke=\"" << kGridColor << "\"/>\n";
    text(o, f.left - 6, y + 4, tick_label(t), "end", 11);
  }
  o << "<line x1=\"" << num(f.left) << "\" x2=\"" << num(f.left) << "\" y1=\"" << num(f.top)
    << "\" y2=\"" << num(f.bottom()) << "\" stroke=\"" << kAxisColor << "\"/>\n";
  const double cy = f.top + f.height / 2;
  o << "<text x=\"14\" y=\"" << num(cy) << "\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
    << num(cy) << ")\">" << xml_escape(label) << "</text>\n";
}

double finite_max(double a, double b) { return std::isfinite(b) ? std::max(a, b) : a; }

}  // namespace

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<double> linear_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || target < 1) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag * 1.0000001) {
      step = m * mag;
      break;
    }
  std::vector<double> out;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-6; k += 1)
    out.push_back(k * step + 0.0);  // k * step, not a running sum: no drift; + 0.0 turns -0 into 0
  return out;
}

std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> out;
  if (!(lo > 0) || !(hi > lo)) return out;
  const int d0 = int(std::floor(std::log10(lo))), d1 = int(std::ceil(std::log10(hi)));
  const bool wide = d1 - d0 > 4;
  for (int d = d0; d <= d1; ++d)
    for (double m : wide ? std::vector<double>{1} : std::vector<double>{1, 2, 5}) {
      const double t = m * std::pow(10.0, d);
      if (t >= lo * 0.999999 && t <= hi * 1.000001) out.push_back(t);
    }
  return out;
}

std::string tick_label(double v) {
  const double a = std::abs(v);
  char buf[32];
  if (a >= 1e9)
    std::snprintf(buf, sizeof buf, "%gG", v / 1e9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
  else if (a >= 1e3)
    std::snprintf(buf, sizeof buf, "%gK", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string render_bar_chart(const SvgBarChart& c) {
  std::ostringstream o;
  open_svg(o, c.id, c.width, c.height);
  titles(o, c.title, c.subtitle);
  legend(o, c.legend, c.width);

  const double top = c.subtitle.empty() ? 34 : 50;
  const double bottom_space = c.rotate_labels ? 96 : 42;
  Frame f{64, top, double(c.width) - 64 - 16, double(c.height) - top - bottom_space};

  double y_max = c.y_max;
  if (y_max <= 0)
    for (const auto& g : c.groups)
      for (const auto& b : g.bars) {
        double s = 0;
        for (const auto& seg : b.segments) s += std::max(0.0, seg.value);
        y_max = finite_max(finite_max(y_max, s), b.range_hi);
      }
  if (y_max <= 0) y_max = 1;
  std::vector<double> ticks = linear_ticks(0, y_max, 5);
  if (ticks.size() >= 2 && ticks.back() < y_max * 0.999)
    ticks.push_back(ticks.back() + (ticks[1] - ticks[0]));
  const double hi =
      std::max(y_max, ticks.back());  // the axis ends on a labelled tick above the data
  y_axis(o, f, ticks, 0, hi, false, c.y_label);

  const size_t G = c.groups.size();
  const double slot = G ? f.width / double(G) : f.width;
  // Label every k-th group so labels keep ~28 px apart (slanted ones need less room).
  const double min_gap = c.rotate_labels ? 13 : 28;
  const size_t every = size_t(std::max(1.0, std::ceil(min_gap / slot)));
  for (size_t gi = 0; gi < G; ++gi) {
    const SvgBarGroup& g = c.groups[gi];
    const double x0 = f.left + slot * double(gi);
    if (c.group_separators && gi > 0)
      o << "<line x1=\"" << num(x0) << "\" x2=\"" << num(x0) << "\" y1=\"" << num(f.top)
        << "\" y2=\"" << num(f.bottom()) << "\" stroke=\"#d0d0d0\" stroke-dasharray=\"2,3\"/>\n";
    const size_t nb = std::max<size_t>(g.bars.size(), 1);
    const double pad = slot * (nb > 1 ? 0.08 : 0.15);
    const double bw = (slot - 2 * pad) / double(nb);
    const double gap = bw > 4 ? 1 : 0;  // a hairline between a group's bars when there is room
    for (size_t bi = 0; bi < g.bars.size(); ++bi) {
      const SvgBar& b = g.bars[bi];
      o << "<g class=\"" << c.bar_class << "\" data-group=\"" << gi << "\" data-bar=\"" << bi
        << "\">";
      if (!b.title.empty()) o << "<title>" << xml_escape(b.title) << "</title>";
      double acc = 0;
      const double x = x0 + pad + bw * double(bi);
      for (const auto& seg : b.segments) {
        if (!(seg.value > 0)) continue;
        const double y1 = f.bottom() - (acc + seg.value) / hi * f.height;
        const double y0 = f.bottom() - acc / hi * f.height;
        o << "<rect x=\"" << num(x) << "\" y=\"" << num(y1) << "\" width=\""
          << num(std::max(0.5, bw - gap)) << "\" height=\"" << num(std::max(0.0, y0 - y1))
          << "\" fill=\"" << seg.color << "\"/>";
        acc += seg.value;
      }
      if (b.range_hi > b.range_lo) {
        const double cx = x + std::max(0.5, bw - gap) / 2, cap = std::min(4.0, bw / 2);
        const double ylo = f.bottom() - std::max(0.0, b.range_lo) / hi * f.height;
        const double yhi = f.bottom() - b.range_hi / hi * f.height;
        o << "<path class=\"range\" d=\"M" << num(cx) << " " << num(ylo) << "V" << num(yhi);
        if (cap >= 1)
          o << "M" << num(cx - cap) << " " << num(ylo) << "h" << num(2 * cap) << "M"
            << num(cx - cap) << " " << num(yhi) << "h" << num(2 * cap);
        o << "\" stroke=\"" << kTextColor << "\" stroke-width=\"1\" fill=\"none\"/>";
      }
      o << "</g>\n";
    }
    if (gi % every == 0 && !g.label.empty()) {
      const double cx = x0 + slot / 2;
      if (c.rotate_labels) {
        const double y = f.bottom() + 12;
        o << "<text x=\"" << num(cx) << "\" y=\"" << num(y)
          << "\" text-anchor=\"end\" font-size=\"11\" "
          << "transform=\"rotate(-50 " << num(cx) << " " << num(y) << ")\">" << xml_escape(g.label)
          << "</text>\n";
      } else {
        text(o, cx, f.bottom() + 15, g.label, "middle", 11);
      }
    }
  }
  o << "<line x1=\"" << num(f.left) << "\" x2=\"" << num(f.right()) << "\" y1=\"" << num(f.bottom())
    << "\" y2=\"" << num(f.bottom()) << "\" stroke=\"" << kAxisColor << "\"/>\n";
  if (!c.x_label.empty()) text(o, f.left + f.width / 2, double(c.height) - 8, c.x_label, "middle");
  o << "</svg>\n";
  return o.str();
}

std::string render_line_chart(const SvgLineChart& c) {
  std::ostringstream o;
  open_svg(o, c.id, c.width, c.height);
  titles(o, c.title, c.subtitle);
  std::vector<SvgLegendItem> items;
  for (const auto& s : c.series) items.push_back({s.name, s.color, !s.line, s.line});
  legend(o, items, c.width);

  const double top = c.subtitle.empty() ? 34 : 50;
  Frame f{64, top, double(c.width) - 64 - 20, double(c.height) - top - 44};
  const double inf = std::numeric_limits<double>::infinity();
  double x_lo = inf, x_hi = -inf, y_lo = inf, y_hi = -inf;
  auto usable = [](double v, bool log) { return std::isfinite(v) && (!log || v > 0); };
  for (const auto& s : c.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!usable(s.x[i], c.log_x) || !usable(s.y[i], c.log_y)) continue;
      x_lo = std::min(x_lo, s.x[i]), x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]), y_hi = std::max(y_hi, s.y[i]);
    }
  if (!(x_hi >= x_lo)) x_lo = 1, x_hi = 10;
  if (!(y_hi >= y_lo)) y_lo = 1, y_hi = 10;
  // A little room around the data; log axes widen by a factor, linear ones by a share.
  auto widen = [](double& lo, double& hi, bool log) {
    if (log) {
      if (hi <= lo) lo /= 2, hi *= 2;
      lo /= 1.15, hi *= 1.15;
    } else {
      const double m = hi > lo ? (hi - lo) * 0.05 : std::max(std::abs(hi) * 0.1, 1.0);
      lo = lo >= 0 && lo - m < 0 ? 0 : lo - m, hi += m;
    }
  };
  widen(x_lo, x_hi, c.log_x);
  widen(y_lo, y_hi, c.log_y);
  const std::vector<double> yt = c.log_y ? log_ticks(y_lo, y_hi) : linear_ticks(y_lo, y_hi, 5);
  const std::vector<double> xt = c.log_x ? log_ticks(x_lo, x_hi) : linear_ticks(x_lo, x_hi, 8);
  y_axis(o, f, yt, y_lo, y_hi, c.log_y, c.y_label);

  auto px = [&](double v) {
    const double a = c.log_x ? std::log10(v) : v, l = c.log_x ? std::log10(x_lo) : x_lo,
                 h = c.log_x ? std::log10(x_hi) : x_hi;
    return f.left + (a - l) / (h - l) * f.width;
  };
  auto py = [&](double v) {
    const double a = c.log_y ? std::log10(v) : v, l = c.log_y ? std::log10(y_lo) : y_lo,
                 h = c.log_y ? std::log10(y_hi) : y_hi;
    return f.bottom() - (a - l) / (h - l) * f.height;
  };
  // x ticks: thin out labels that would collide (about 7 px per character).
  double last_right = -1e9;
  for (double t : xt) {
    const double x = px(t);
    o << "<line x1=\"" << num(x) << "\" x2=\"" << num(x) << "\" y1=\"" << num(f.top) << "\" y2=\""
      << num(f.bottom()) << "\" stroke=\"" << kGridColor << "\"/>\n";
    const std::string label = tick_label(t);
    const double half = 3.5 * double(label.size());
    if (x - half > last_right + 6) {
      text(o, x, f.bottom() + 15, label, "middle", 11);
      last_right = x + half;
    }
  }
  o << "<line x1=\"" << num(f.left) << "\" x2=\"" << num(f.right()) << "\" y1=\"" << num(f.bottom())
    << "\" y2=\"" << num(f.bottom()) << "\" stroke=\"" << kAxisColor << "\"/>\n";

  for (const auto& s : c.series) {
    if (s.line) {
      o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\" points=\"";
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (usable(s.x[i], c.log_x) && usable(s.y[i], c.log_y))
          o << num(px(s.x[i])) << "," << num(py(s.y[i])) << " ";
      o << "\"/>\n";
    }
    if (s.markers)
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!usable(s.x[i], c.log_x) || !usable(s.y[i], c.log_y)) continue;
        o << "<circle class=\"" << s.point_class << "\" cx=\"" << num(px(s.x[i])) << "\" cy=\""
          << num(py(s.y[i])) << "\" r=\"4.5\" fill=\"" << s.color
          << "\" fill-opacity=\"0.85\" stroke=\"#fff\" stroke-width=\"1\">";
        if (i < s.titles.size()) o << "<title>" << xml_escape(s.titles[i]) << "</title>";
        o << "</circle>\n";
      }
  }
  if (!c.x_label.empty()) text(o, f.left + f.width / 2, double(c.height) - 8, c.x_label, "middle");
  o << "</svg>\n";
  return o.str();
}

}  // namespace adaptiveload
