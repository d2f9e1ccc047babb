#include "adaptiveload/util/format.h"
#include "adaptiveload/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "adaptiveload/presets/presets.h"
#include "adaptiveload/report/svg_chart.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

constexpr const char* kBusyA = "#3a6db5";
constexpr const char* kBusyB = "#78a3dc";
constexpr const char* kPadded = "#a0a7b0";
constexpr const char* kIdle = "#f0a04b";
constexpr const char* kSamplesColor = "#3a6db5";
constexpr const char* kTokensColor = "#5b9a59";

// Full precision for data-value attributes, so a reader can compare with the JSON exactly.
std::string exact(double v) { return fmt("%.17g", v); }

// A bucket-like shape of S tokens for the smooth cost curve: one square frame (cost models
// depend on S; factorized-attention presets also on the frame grid, for which the markers
// of the real buckets are the truth).
Bucket synthetic_bucket(double tokens) {
  Bucket b;
  b.tokens = std::max<int64_t>(1, std::llround(tokens));
  b.grid_f = 1;
  b.grid_h = std::max<int64_t>(1, std::llround(std::sqrt(double(b.tokens))));
  b.grid_w = (b.tokens + b.grid_h - 1) / b.grid_h;
  b.frames = 1;
  return b;
}

struct Cell {
  std::string key, text;
  double value;
};

std::vector<Cell> metric_cells(const Metrics& m, double base_samples_per_s) {
  return {
      {"imbalance", fmt("%.1f%%", 100 * m.imbalance), m.imbalance},
      {"imbalance_step_mean", fmt("%.1f%%", 100 * m.imbalance_step_mean), m.imbalance_step_mean},
      {"imbalance_step_maxmin", fmt("%.1f%%", 100 * m.imbalance_step_maxmin),
       m.imbalance_step_maxmin},
      {"throughput_samples_per_s", fmt("%.2f", m.throughput_samples_per_s),
       m.throughput_samples_per_s},
      {"throughput_tokens_per_s", fmt("%.0f", m.throughput_tokens_per_s),
       m.throughput_tokens_per_s},
      // A strategy that dropped samples trained fewer: no speedup, so it cannot rank higher.
      {"speedup",
       m.dropped > 0 || base_samples_per_s < 0 ? "-*"
       : base_samples_per_s > 0 ? fmt("%.2fx", m.throughput_samples_per_s / base_samples_per_s)
                                : "-",
       m.dropped == 0 && base_samples_per_s > 0 ? m.throughput_samples_per_s / base_samples_per_s
                                                : 0},
      {"peak_memory_utilization_mean", fmt("%.1f%%", 100 * m.peak_memory_utilization_mean),
       m.peak_memory_utilization_mean},
      {"peak_memory_utilization_max", fmt("%.1f%%", 100 * m.peak_memory_utilization_max),
       m.peak_memory_utilization_max},
      {"diversity", fmt("%.1f", m.diversity), m.diversity},
      {"steps", thousands(m.steps), double(m.steps)},
      {"micro_batches_per_rank_step", fmt("%.2f", m.micro_batches_per_rank_step),
       m.micro_batches_per_rank_step},
      {"fixed_cost_fraction", fmt("%.1f%%", 100 * m.fixed_cost_fraction), m.fixed_cost_fraction},
      {"collective_s", fmt("%.1f", m.collective_s), m.collective_s},
      {"epoch_time_s", fmt("%.0f", m.epoch_time_s), m.epoch_time_s},
      {"padded", thousands(m.padded), double(m.padded)},
      {"dropped", thousands(m.dropped), double(m.dropped)},
  };
}

const char* const kColumnHeads[] = {"imbalance", "max-mean", "max-min", "samples/s", "tokens/s",
                                    "speedup",   "mem avg",  "mem max", "buckets",   "steps",
                                    "mb/rank",   "fixed",    "sync s",  "epoch s",
                                    "padded",    "dropped"};

std::string summary_table(const std::vector<Metrics>& metrics) {
  double base = 0;  // < 0: the baseline dropped samples, so no speedup is comparable
  for (const auto& m : metrics)
    if (m.name == "equal_tokens") base = m.dropped > 0 ? -1 : m.throughput_samples_per_s;
  std::ostringstream o;
  o << "<table class=\"summary\" id=\"summary\">\n<thead><tr><th>strategy</th>";
  for (const char* h : kColumnHeads) o << "<th>" << h << "</th>";
  o << "</tr></thead>\n<tbody>\n";
  for (const auto& m : metrics) {
    o << "<tr data-strategy=\"" << xml_escape(m.name) << "\"><td class=\"name\">"
      << xml_escape(m.name) << "</td>";
    for (const Cell& c : metric_cells(m, base))
      o << "<td data-key=\"" << c.key << "\" data-value=\"" << exact(c.value) << "\">" << c.text
        << "</td>";
    o << "</tr>\n";
  }
  o << "</tbody>\n</table>\n";
  return o.str();
}

std::string inputs_section(const Planner& planner, const Manifest* manifest) {
  const Bucketing& bk = planner.bucketing();
  const auto& cfg = planner.config();
  std::ostringstream o;
  o << "<ul class=\"inputs\">\n";
  if (manifest)
    for (const auto& f : manifest->files())
      o << "<li>manifest <code>" << xml_escape(f.path) << "</code>: " << thousands(f.rows)
        << " rows</li>\n";
  o << "<li>" << thousands(bk.usable - int64_t(planner.oversize().size())) << " samples planned in "
    << bk.buckets.size() << " buckets (" << bk.bad << " bad rows, " << bk.unfit.size()
    << " fit no bucket, " << planner.oversize().size() << " oversize)</li>\n";
  o << "<li>model <b>" << xml_escape(planner.model().name) << "</b>, " << cfg.world_size << " x <b>"
    << xml_escape(planner.device().name) << "</b>, grid " << xml_escape(planner.grid().name)
    << ", cost model " << xml_escape(planner.cost().name()) << ", checkpointing "
    << (cfg.checkpointing ? "on" : "off") << ", " << (planner.sharded() ? "fsdp" : "ddp")
    << ", <b>" << sync_name(planner.sync()) << " sync</b>"
    << (planner.sync() == SyncMode::kMicro ? " (FSDP / ZeRO-2/3: every rank the same micro-batches per step)"
                                           : " (DDP / ZeRO-1: one all-reduce per step)")
    << ", seed " << cfg.seed << ", epoch " << cfg.epoch << "</li>\n";
  o << "<li>global batch: " << xml_escape(planner.global_batch_text()) << "</li>\n";
  o << "<li>budgets: M_mem " << thousands(planner.mem_budget_tokens()) << " tokens"
    << (cfg.mem_budget_tokens ? "" : " (auto)") << ", M_comp " << fmt("%.4g", planner.comp_budget())
    << " (B x S^" << fmt("%.3f", planner.p()) << (cfg.comp_budget > 0 ? "" : ", auto")
    << "), step budget " << fmt("%.3f", planner.step_budget_s()) << " s"
    << (cfg.step_budget_s > 0 ? "" : " (auto)") << "</li>\n";
  o << "</ul>\n";
  return o.str();
}

std::vector<ReportChart> bucket_charts(const Planner& planner) {
  const Bucketing& bk = planner.bucketing();
  SvgBarChart samples, tokens;
  samples.id = "buckets-samples";
  samples.title = "Samples per bucket";
  samples.y_label = "samples";
  tokens.id = "buckets-tokens";
  tokens.title = "Tokens per bucket";
  tokens.y_label = "tokens (samples x S)";
  int64_t total_samples = 0, total_tokens = 0;
  for (size_t b = 0; b < bk.buckets.size(); ++b) {
    const Bucket& x = bk.buckets[b];
    const int64_t n = bk.bucket_counts[b];
    if (n <= 0) continue;
    total_samples += n, total_tokens += n * x.tokens;
    const std::string tip = x.name() + ": " + thousands(n) + " samples x " + thousands(x.tokens) +
                            " tokens = " + thousands(n * x.tokens) + " tokens";
    samples.groups.push_back({x.name(), {SvgBar{{{double(n), kSamplesColor}}, tip}}});
    tokens.groups.push_back({x.name(), {SvgBar{{{double(n * x.tokens), kTokensColor}}, tip}}});
  }
  samples.subtitle = thousands(total_samples) + " samples in " +
                     std::to_string(samples.groups.size()) +
                     " buckets (grid order: tier, aspect ratio, frames)";
  tokens.subtitle = thousands(total_tokens) + " tokens: long clips carry most of the work";
  for (SvgBarChart* c : {&samples, &tokens}) {
    c->rotate_labels = true;
    c->height = 340;
    c->bar_class = "bucket";
  }
  return {{samples.id, samples.title, render_bar_chart(samples)},
          {tokens.id, tokens.title, render_bar_chart(tokens)}};
}

ReportChart cost_chart(const Planner& planner,
                       const std::vector<std::pair<double, double>>& points) {
  const Bucketing& bk = planner.bucketing();
  const CostModel& cost = planner.cost();
  SvgLineSeries curve{
      "c(S), cost model '" + cost.name() + "'", "#3a6db5", {}, {}, true, false, {}, "curve"};
  SvgLineSeries used{"buckets in use", "#d0432b", {}, {}, false, true, {}, "bucket"};
  SvgLineSeries measured{
      "calibrated points (time_s / batch)", "#2b9a3e", {}, {}, false, true, {}, "calibrated"};
  double lo = 1e300, hi = 0;
  for (size_t b = 0; b < bk.buckets.size(); ++b) {
    if (bk.bucket_counts[b] <= 0) continue;
    const Bucket& x = bk.buckets[b];
    const double t = cost.sample_time(x);
    used.x.push_back(double(x.tokens));
    used.y.push_back(t);
    used.titles.push_back(x.name() + ": " + thousands(x.tokens) + " tokens, " + fmt("%.4g", t) +
                          " s/sample, " + thousands(bk.bucket_counts[b]) + " samples");
    lo = std::min(lo, double(x.tokens)), hi = std::max(hi, double(x.tokens));
  }
  for (const auto& [s, t] : points) {
    measured.x.push_back(s);
    measured.y.push_back(t);
    measured.titles.push_back(thousands(std::llround(s)) + " tokens: " + fmt("%.4g", t) +
                              " s/sample (measured)");
    lo = std::min(lo, s), hi = std::max(hi, s);
  }
  if (!(hi > 0)) lo = 256, hi = 100000;
  lo = std::max(1.0, lo / 1.5), hi *= 1.5;
  constexpr int kCurvePoints = 120;
  for (int i = 0; i <= kCurvePoints; ++i) {
    const double s = lo * std::pow(hi / lo, double(i) / kCurvePoints);
    curve.x.push_back(s);
    curve.y.push_back(cost.sample_time(synthetic_bucket(s)));
  }
  SvgLineChart c;
  c.id = "cost";
  c.title = "Cost model: seconds per sample vs tokens";
  c.subtitle =
      "log-log; marginal forward+backward time of one sample in a large micro-batch (no launch "
      "overhead)";
  c.x_label = "tokens per sample S";
  c.y_label = "seconds per sample";
  c.log_x = c.log_y = true;
  c.series = {curve, used};
  if (!measured.x.empty()) c.series.push_back(measured);
  return {c.id, "Cost model c(S)", render_line_chart(c)};
}

struct Window {
  size_t first = 0, end = 0;
};

Window step_window(const Plan& p, const ReportOptions& o) {
  Window w;
  w.first = size_t(std::max<int64_t>(0, o.first_step));
  w.end = std::min(p.num_steps(), w.first + size_t(std::max<int64_t>(1, o.steps)));
  if (w.first > w.end) w.first = w.end;
  return w;
}

ReportChart step_chart(const Planner& planner, const Plan& plan, const Metrics& m,
                       const ReportOptions& o, double y_max) {
  const SimEnv env = planner.sim_env(plan.world_size);
  const std::vector<double> T = rank_times(plan, env);
  const size_t W = size_t(plan.world_size);
  const Window win = step_window(plan, o);
  SvgBarChart c;
  c.id = "steps-" + plan.strategy;
  c.title = "Per-rank time per step: " + plan.strategy;
  c.x_label = "global step";
  c.y_label = "seconds";
  c.bar_class = "rank";
  c.y_max = y_max;
  c.group_separators = true;
  c.legend = {{"busy (micro-batches in alternating shades)", kBusyA},
              {"idle (waits for the slowest rank)", kIdle}};
  double busy = 0, span = 0;
  bool any_padded = false;
  for (size_t t = win.first; t < win.end; ++t) {
    double mx = 0;
    for (size_t r = 0; r < W; ++r) mx = std::max(mx, T[t * W + r]);
    SvgBarGroup g;
    g.label = std::to_string(t);
    for (size_t r = 0; r < W; ++r) {
      SvgBar b;
      const auto [m0, m1] = plan.rank_range(t, int(r));
      int64_t samples = 0;
      for (uint64_t i = m0; i < m1; ++i) {
        const MicroBatch& mb = plan.micro_batches[i];
        const double s = group_microbatch_time(*env.cost, mb.count, (*env.buckets)[mb.bucket], plan.group(i), env.layout.sp);
        any_padded |= mb.padded != 0;
        b.segments.push_back({s, mb.padded ? kPadded : ((i - m0) % 2 ? kBusyB : kBusyA)});
        samples += mb.count;
      }
      const double x = T[t * W + r];
      b.segments.push_back({mx - x, kIdle});
      b.title = "step " + std::to_string(t) + ", rank " + std::to_string(r) + ": busy " +
                fmt("%.3f", x) + " s (" + std::to_string(m1 - m0) + " micro-batches, " +
                std::to_string(samples) + " samples), idle " + fmt("%.3f", mx - x) + " s";
      g.bars.push_back(std::move(b));
      busy += x;
    }
    span += mx * double(W);
    c.groups.push_back(std::move(g));
  }
  if (any_padded) c.legend.insert(c.legend.begin() + 1, {"padded repeats", kPadded});
  if (win.first >= win.end) {
    c.subtitle =
        "no steps in the window: the plan has " + std::to_string(plan.num_steps()) + " steps";
  } else {
    c.subtitle = "steps " + std::to_string(win.first) + "-" + std::to_string(win.end - 1) + " of " +
                 thousands(int64_t(plan.num_steps())) + ", " + std::to_string(W) +
                 " ranks; idle in this window " +
                 fmt("%.1f%%", span > 0 ? 100 * (1 - busy / span) : 0) +
                 " of GPU time, epoch imbalance " + fmt("%.1f%%", 100 * m.imbalance);
  }
  const size_t bars = (win.end - win.first) * W;
  c.width = int(std::clamp<size_t>(120 + bars * 5, 1200, 4000));  // 24 steps x 8 ranks fit the page
  c.height = 360;
  return {c.id, c.title, render_bar_chart(c)};
}

constexpr const char* kCss = R"(
body { font-family: Helvetica, Arial, sans-serif; color: #222; margin: 24px auto; max-width: 1260px; padding: 0 16px; }
h1 { font-size: 24px; margin-bottom: 4px; }
h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.note { color: #555; font-size: 13px; max-width: 1100px; }
ul.inputs { font-size: 14px; line-height: 1.5; }
table.summary { border-collapse: collapse; font-size: 13px; }
table.summary th, table.summary td { padding: 4px 9px; text-align: right; border-bottom: 1px solid #e5e5e5; }
table.summary th { background: #f3f5f8; }
table.summary td.name, table.summary th:first-child { text-align: left; font-weight: bold; }
div.chart { overflow-x: auto; margin: 8px 0 4px 0; }
svg.chart { display: block; }
code { font-size: 13px; }
)";

}  // namespace

std::vector<std::pair<double, double>> profile_points(const std::string& path) {
  using json = nlohmann::json;
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {  // parse_error, or out_of_range (number overflow)
    throw InputError(path, std::string("profile is not valid JSON: ") + e.what());
  }
  std::vector<std::pair<double, double>> out;
  if (!j.is_object() || !j.contains("points")) return out;
  if (!j["points"].is_array())
    throw InputError(path, "profile 'points' must be an array of {tokens, batch, time_s}");
  size_t i = 0;
  for (const json& p : j["points"]) {
    const std::string where = path + ": points[" + std::to_string(i++) + "]";
    auto get = [&](const char* key) {
      if (!p.is_object() || !p.contains(key) || !p[key].is_number())
        throw InputError(where, std::string("needs a number '") + key +
                                    "' (entries are {tokens, batch, time_s})");
      const double v = p[key].get<double>();
      if (!std::isfinite(v) || v <= 0)
        throw InputError(where, std::string("'") + key + "' must be positive");
      return v;
    };
    const double tokens = get("tokens"), batch = get("batch"), time_s = get("time_s");
    out.emplace_back(tokens, time_s / batch);
  }
  return out;
}

Report build_report(const Planner& planner, const Manifest* manifest,
                    const std::vector<Plan>& plans, const std::vector<Metrics>& metrics,
                    const ReportOptions& o) {
  Report rep;
  std::vector<std::pair<double, double>> points;
  if (!o.profile_path.empty()) points = profile_points(o.profile_path);

  for (auto& c : bucket_charts(planner)) rep.charts.push_back(std::move(c));
  rep.charts.push_back(cost_chart(planner, points));
  // One y scale for every strategy's window, so the charts compare at a glance.
  double y_max = 0;
  for (const Plan& p : plans) {
    const std::vector<double> T = rank_times(p, planner.sim_env(p.world_size));
    const Window w = step_window(p, o);
    for (size_t i = w.first * size_t(p.world_size); i < w.end * size_t(p.world_size); ++i)
      y_max = std::max(y_max, T[i]);
  }
  const size_t first_step_chart = rep.charts.size();
  for (size_t i = 0; i < plans.size() && i < metrics.size(); ++i)
    rep.charts.push_back(step_chart(planner, plans[i], metrics[i], o, y_max));

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
    << xml_escape(o.title) << "</title>\n<style>" << kCss << "</style>\n</head>\n<body>\n";
  h << "<h1>" << xml_escape(o.title) << "</h1>\n";
  h << "<p class=\"note\">Simulated by the AdaptiveLoad planner: the same manifest and budgets for "
       "every strategy. "
       "Hover over bars and points for exact values.</p>\n";
  h << "<h2>Inputs</h2>\n" << inputs_section(planner, manifest);
  h << "<h2>Summary</h2>\n" << summary_table(metrics);
  h << "<p class=\"note\">imbalance: idle fraction of the GPUs, 1 - sum<sub>t</sub> "
       "mean<sub>r</sub> T / "
       "sum<sub>t</sub> max<sub>r</sub> T; max-mean, max-min: per-step mean of (max-mean)/max and "
       "(max-min)/max. "
       "Throughput includes one gradient all-reduce per step; mem: per-step peak over ranks / "
       "device memory; "
       "buckets: distinct buckets per global step; mb/rank: micro-batches per rank and step "
       "(gradient "
       "accumulation); speedup: samples/s over equal_tokens. Samples/s count trained samples only "
       "(padded repeats and dropped samples excluded); -*: the strategy (or equal_tokens) dropped "
       "samples at the epoch's end (--end-policy drop), so its speedup is not comparable.</p>\n";
  h << "<h2>Buckets</h2>\n";
  for (size_t i = 0; i < 2; ++i) h << "<div class=\"chart\">\n" << rep.charts[i].svg << "</div>\n";
  h << "<h2>Cost model</h2>\n<div class=\"chart\">\n" << rep.charts[2].svg << "</div>\n";
  h << "<p class=\"note\">The curve evaluates the cost model on a smooth range of token counts; "
       "red points are "
       "the buckets of this manifest"
    << (points.empty() ? "" : ", green points the profile's measurements (time_s / batch)")
    << ".</p>\n";
  h << "<h2>Per-rank load per step</h2>\n<p class=\"note\">Each group is one global step, one bar "
       "per rank: blue "
       "is the rank's compute (each micro-batch a shade), orange the time it waits at the gradient "
       "all-reduce "
       "for the step's slowest rank. Same y scale for every strategy.</p>\n";
  for (size_t i = first_step_chart; i < rep.charts.size(); ++i)
    h << "<div class=\"chart\">\n" << rep.charts[i].svg << "</div>\n";
  if (!o.data_json.empty()) {
    std::string data = o.data_json;  // "</" would end the element early
    for (size_t p = 0; (p = data.find("</", p)) != std::string::npos; p += 3)
      data.replace(p, 2, "<\\/");
    h << "<script type=\"application/json\" id=\"al-data\">" << data << "</script>\n";
  }
  h << "</body>\n</html>\n";
  rep.html = h.str();
  return rep;
}

}  // namespace adaptiveload
