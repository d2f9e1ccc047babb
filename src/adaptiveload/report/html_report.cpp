#include "adaptiveload/report/html_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "adaptiveload/presets/presets.h"
#include "adaptiveload/report/metric_columns.h"
#include "adaptiveload/report/step_chart.h"
#include "adaptiveload/report/svg_chart.h"
#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"

namespace adaptiveload {
namespace {

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

// The summary table: report/metric_columns.h's columns that the report shows; data-key is
// the field of `plan --json`, data-value its exact value.
std::string summary_table(const std::vector<Metrics>& metrics) {
  const double base = speedup_base(metrics);
  std::ostringstream o;
  o << "<table class=\"summary\" id=\"summary\">\n<thead><tr><th>strategy</th>";
  for (const MetricColumn& c : metric_columns())
    if (c.in_html) o << "<th>" << c.heading(true) << "</th>";
  o << "</tr></thead>\n<tbody>\n";
  for (const auto& m : metrics) {
    o << "<tr data-strategy=\"" << xml_escape(m.name) << "\"><td class=\"name\">"
      << xml_escape(m.name) << "</td>";
    const Speedup s = speedup(m, base);
    for (const MetricColumn& c : metric_columns())
      if (c.in_html)
        o << "<td data-key=\"" << c.key << "\" data-value=\"" << exact(column_value(c, m, s))
          << "\">" << c.text(m, s, true) << "</td>";
    o << "</tr>\n";
  }
  o << "</tbody>\n</table>\n";
  return o.str();
}

// What every rank joins in each micro-batch slot of micro sync (Planner::layout): the
// parameter all-gathers only when the model state is sharded.
std::string slot_collectives(const Planner& planner) {
  if (!planner.sharded()) return "a gradient reduce-scatter";
  return planner.config().reshard_after_forward
             ? "a parameter all-gather in forward, another in backward and a gradient "
               "reduce-scatter"
             : "a parameter all-gather in forward and a gradient reduce-scatter";
}

// The plan's synchronisation in words (docs/planner.md, "Sync modes").
std::string sync_text(const Planner& planner) {
  if (!lockstep_slots(planner.sync()))
    return "DDP / ZeRO-1: one gradient all-reduce per step, after the gradient accumulation; "
           "ranks may run different numbers of micro-batches, and a step takes its slowest "
           "rank's compute plus the all-reduce";
  return "FSDP / FSDP2 / ZeRO-2/3: every micro-batch slot runs " + slot_collectives(planner) +
         ", which every rank joins, so all ranks run the same number of micro-batches per "
         "step; a step takes the sum over its slots of the slowest rank's micro-batch plus the "
         "collectives' exposed time, up to " +
         fmt("%.0f%%", 100 * planner.config().collective_overlap) +
         " of them overlapping the slot's compute";
}

// Sequence parallelism is in use when some sample needs a group, or a plan chose one.
bool sp_in_use(const Planner& planner, const std::vector<Metrics>& metrics) {
  if (planner.groups_in_use()) return true;
  for (const auto& m : metrics)
    if (m.group_max > 1) return true;
  return false;
}

bool mixes_groups(const StrategyEntry& s) { return s.mixes_groups(); }
bool runs_one_group(const StrategyEntry& s) {
  return !s.mixes_groups() && !s.packs();
}  // packers: none

// The rows `<strategy> g=G` of the strategies that mix group sizes (balanced).
bool has_fixed_group_rows(const std::vector<Metrics>& metrics) {
  for (const auto& m : metrics)
    for (const StrategyEntry& s : strategies())
      if (s.mixes_groups() && m.name.rfind(std::string(s.name) + " g=", 0) == 0) return true;
  return false;
}

// The rows `balanced g=G` (cli compare(): balanced with one group size for every sample).
std::string fixed_group_rows_text() {
  return "balanced g=G: balanced with every sample on a fixed group of G GPUs (one sequence-"
         "parallel size for the whole run), shown for comparison beside balanced with "
         "per-sample groups";
}

// The sequence-parallel line: policy, allowed sizes, samples per group size and the sizes
// each plan used (as `plan`'s table header and its g column).
std::string sp_item(const Planner& planner, const std::vector<Metrics>& metrics) {
  const Bucketing& bk = planner.bucketing();
  const auto& cfg = planner.config();
  const SpPolicy policy = planner.options().sp;
  std::ostringstream o;
  o << "<li>sequence parallelism (Ulysses): policy <b>"
    << xml_escape(sp_policy_text(planner.options())) << "</b>";
  if (policy == SpPolicy::kAuto)
    o << " (a sample that does not fit one GPU runs on the smallest group it fits, or a larger "
         "one where balanced's simulation says that shortens the epoch)";
  else if (policy == SpPolicy::kMin)
    o << " (every sample on the smallest group it fits)";
  else if (policy == SpPolicy::kPerSample)
    o << " (balanced tries groups even for samples that fit one GPU)";
  else if (policy == SpPolicy::kFixed)
    o << " (every sample on " << planner.options().sp_group << " GPUs)";
  const SeqParallel sp = planner.seq_parallel();
  std::string usable;
  for (int g = 1; g <= kMaxGroup; g *= 2)
    if (sp.allows(g)) usable += (usable.empty() ? "" : ",") + std::to_string(g);
  o << ", allowed group sizes " << xml_escape(cfg.sp_sizes) << " (usable on " << cfg.world_size
    << " x " << xml_escape(planner.device().name) << ": " << usable << ")";
  std::map<int, int64_t> per_g;  // samples per group size of their bucket
  for (size_t b = 0; b < bk.buckets.size(); ++b)
    if (bk.bucket_counts[b] > 0)
      per_g[planner.bucket_groups().empty() ? 1 : planner.bucket_groups()[b]] +=
          bk.bucket_counts[b];
  o << "; samples on g GPUs:";
  for (const auto& [g, n] : per_g) o << " g=" << g << " " << thousands(n);
  // Strategies by the group sizes their plans use, in table order.
  std::vector<std::pair<std::string, std::string>> used;  // sizes, strategies
  for (const auto& m : metrics) {
    const std::string g = group_text(m);
    auto it = std::find_if(used.begin(), used.end(), [&](const auto& u) { return u.first == g; });
    if (it == used.end())
      used.push_back({g, xml_escape(m.name)});
    else
      it->second += ", " + xml_escape(m.name);
  }
  std::stable_sort(used.begin(), used.end(), [](const auto& a, const auto& b) {
    return std::stoi(a.first) < std::stoi(b.first);  // by the smallest size ("1-2" -> 1)
  });
  o << "; group sizes used (column g):";
  for (size_t i = 0; i < used.size(); ++i)
    o << (i ? ";" : "") << " g=" << used[i].first << " by " << used[i].second;
  o << ". ";
  if (policy == SpPolicy::kAuto || policy == SpPolicy::kPerSample || policy == SpPolicy::kMin)
    o << strategy_names(", ", " and ", mixes_groups) << " mixes group sizes per sample"
      << (policy == SpPolicy::kMin ? " (each on the smallest it fits)"
                                   : " and keeps the fastest choice it simulates")
      << "; " << strategy_names(", ", " and ", runs_one_group)
      << " run every sample on g=" << planner.max_group() << " (the largest any sample needs)";
  else
    o << "every strategy runs every sample on g=" << planner.max_group();
  if (has_fixed_group_rows(metrics))
    o << "; the table's " << strategy_names(", ", " and ", mixes_groups)
      << " g=G rows put every sample on G";
  o << ".</li>\n";
  return o.str();
}

std::string inputs_section(const Planner& planner, const Manifest* manifest,
                           const std::vector<Metrics>& metrics) {
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
    << (cfg.checkpointing ? "on" : "off") << ", " << (planner.sharded() ? "fsdp" : "ddp") << ", <b>"
    << sync_name(planner.sync()) << " sync</b> (" << (planner.options().sync ? "" : "auto; ")
    << sync_text(planner) << ")"
    << (planner.packing()
            ? ", <b>packing on</b> (micro-batches may be packs of samples of any buckets)"
            : "")
    << ", seed " << cfg.seed << ", epoch " << cfg.epoch << "</li>\n";
  if (sp_in_use(planner, metrics)) o << sp_item(planner, metrics);
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

Report build_report(const Planner& planner, const Manifest* manifest,
                    const std::vector<Plan>& plans, const std::vector<Metrics>& metrics,
                    const ReportOptions& o) {
  Report rep;
  // The profile the planner read (never the file again): its calibrated points, if any.
  static const std::vector<std::pair<double, double>> kNone;
  const auto& points = planner.profile() ? planner.profile()->points : kNone;

  for (auto& c : bucket_charts(planner)) rep.charts.push_back(std::move(c));
  rep.charts.push_back(cost_chart(planner, points));
  // One y scale for every strategy's window, so the charts compare at a glance.
  const size_t n = std::min(plans.size(), metrics.size());
  std::vector<std::vector<StepBars>> bars(n);
  double y_max = 0;
  for (size_t i = 0; i < n; ++i) {
    bars[i] = window_bars(planner, plans[i], step_window(plans[i], o));
    for (const StepBars& s : bars[i]) y_max = std::max(y_max, s.top);
  }
  const size_t first_step_chart = rep.charts.size();
  bool binned = false;
  for (size_t i = 0; i < n; ++i) {
    rep.charts.push_back(
        step_chart(plans[i], metrics[i], bars[i], step_window(plans[i], o), y_max));
    binned |= ranks_per_bar(size_t(plans[i].world_size), bars[i].size()) > 1;
  }
  const bool micro = lockstep_slots(planner.sync());

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
    << xml_escape(o.title) << "</title>\n<style>" << kCss << "</style>\n</head>\n<body>\n";
  h << "<h1>" << xml_escape(o.title) << "</h1>\n";
  h << "<p class=\"note\">Simulated by the AdaptiveLoad planner: the same manifest and budgets for "
       "every strategy. "
       "Hover over bars and points for exact values.</p>\n";
  h << "<h2>Inputs</h2>\n" << inputs_section(planner, manifest, metrics);
  h << "<h2>Summary</h2>\n" << summary_table(metrics);
  h << "<p class=\"note\">imbalance: idle fraction of the GPUs, 1 - sum<sub>t</sub> "
       "mean<sub>r</sub> T / sum<sub>t</sub> max<sub>r</sub> T"
    << (micro ? ", T a rank's micro-batch in each slot (sums over every step's slots)" : "")
    << "; max-mean, max-min: per-step mean of (max-mean)/max and (max-min)/max. "
       "samples/s, tokens/s: samples and video tokens trained per second of the simulated "
       "epoch, synchronisation included ("
    << (micro ? "in every micro-batch slot " + slot_collectives(planner) +
                    ", beyond what overlaps the slot's compute"
              : "one gradient all-reduce per step")
    << "); padded repeats and dropped samples are not counted; speedup: samples/s over "
    << baseline_strategy()
    << ". mem avg, mem max: per-step peak memory over ranks / device memory, mean "
       "and max over the epoch; buckets: distinct buckets per global step; steps: global steps "
       "in the epoch; batch: samples per global step (mean); mb/rank: micro-batches per rank "
       "per step (gradient accumulation"
    << (micro ? "; the same on every rank" : "")
    << "); fixed: share of GPU time in per-micro-batch fixed costs (overhead and small-batch "
       "inefficiency); useful: share of GPU time in trained samples' work at full efficiency; "
       "tok dev: largest deviation of a step's tokens from their mean; sync s: seconds of the "
       "epoch in synchronisation the compute does not "
       "hide ("
    << (micro ? "the exposed collectives of every slot" : "the all-reduce of every step")
    << "); epoch s: the simulated epoch, the sum over steps of "
    << (micro ? "every slot's slowest micro-batch plus its exposed collectives"
              : "the slowest rank's compute plus the all-reduce")
    << (planner.step_fixed_s() > 0
            ? fmt(", plus the profile's optimizer step (%.2f ms)", 1e3 * planner.step_fixed_s())
            : std::string())
    << "; g: sequence-parallel group sizes (GPUs per sample) used; padded: repeated samples "
       "added at the epoch's end so every rank has work (--end-policy pad); dropped: samples "
       "left out of the epoch for that reason (--end-policy drop); -*: the strategy (or "
    << baseline_strategy()
    << ") dropped samples at the epoch's end (--end-policy drop), so its speedup is "
       "not "
       "comparable."
    << (has_fixed_group_rows(metrics) ? " " + fixed_group_rows_text() + "." : "") << "</p>\n";
  h << "<h2>Buckets</h2>\n";
  for (size_t i = 0; i < 2; ++i) h << "<div class=\"chart\">\n" << rep.charts[i].svg << "</div>\n";
  h << "<h2>Cost model</h2>\n<div class=\"chart\">\n" << rep.charts[2].svg << "</div>\n";
  h << "<p class=\"note\">The curve evaluates the cost model on a smooth range of token counts; "
       "red points are "
       "the buckets of this manifest"
    << (points.empty() ? "" : ", green points the profile's measurements (time_s / batch)")
    << ".</p>\n";
  h << "<h2>Per-rank load per step</h2>\n<p class=\"note\">Each group is one global step, one bar "
       "per rank. ";
  if (micro)
    h << "In micro sync the ranks run their micro-batches in slots: the i-th micro-batch of "
         "every rank runs together, and each slot runs "
      << slot_collectives(planner)
      << " that every rank joins. A bar stacks, slot by slot, the rank's micro-batch (blue, "
         "alternating shades) and the time it waits for that slot's slowest rank (orange); every "
         "bar of a step ends at the sum over its slots of the slowest rank's micro-batch. The "
         "collectives' exposed time (sync s) is not drawn.";
  else
    h << "Blue is the rank's compute (each micro-batch a shade), orange the time it waits for "
         "the step's slowest rank before the step's gradient all-reduce; the all-reduce itself "
         "(sync s) is not drawn.";
  if (binned)
    h << " Where one bar per rank would be under " << fmt("%.0f", kMinBarPx)
      << " px wide (many ranks), a bar stands for a bin of consecutive ranks (the chart's subtitle "
         "says how "
         "many): the mean over its ranks of the busy time, padded repeats and idle time, with a "
         "black line from its least to its most busy rank's busy time; hover for the ranks and "
         "their times.";
  if (!planner.ranks().empty())
    h << " Ranks are not alike (" << planner.ranks().summary() << "; speeds relative to "
      << planner.device().name << "): each bar is the rank's time at its speed.";
  h << " Same y scale for every strategy.</p>\n";
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
