#include "adaptiveload/report/step_chart.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "adaptiveload/util/format.h"

namespace adaptiveload {
namespace {

constexpr const char* kBusyA = "#3a6db5";
constexpr const char* kBusyB = "#78a3dc";
constexpr const char* kPadded = "#a0a7b0";
constexpr const char* kIdle = "#f0a04b";
constexpr const char* kRangeColor = "#222";

std::string chart_slug(const std::string& name) {  // "balanced g=2" -> "balanced-g2"
  std::string out;
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')
      out += c;
    else if (c == ' ')
      out += '-';
  return out;
}

}  // namespace

StepWindow step_window(const Plan& p, const ReportOptions& o) {
  StepWindow w;
  w.first = size_t(std::max<int64_t>(0, o.first_step));
  w.end = std::min(p.num_steps(), w.first + size_t(std::max<int64_t>(1, o.steps)));
  if (w.first > w.end) w.first = w.end;
  return w;
}

std::vector<StepBars> window_bars(const Planner& planner, const Plan& plan, const StepWindow& win) {
  const SimEnv env = planner.sim_env(plan.world_size);
  const size_t W = size_t(plan.world_size);
  const bool micro = lockstep_slots(plan.sync);
  MicroShape shape;
  // The simulator's seconds, on ranks that are not alike at the rank's speed (its group's slowest).
  auto time_of = [&](uint64_t i, size_t r) {
    const size_t g = size_t(plan.group(i));
    return micro_batch_seconds(plan, i, env, shape) / env.layout.group_speed(r - r % g, int(g));
  };
  std::vector<StepBars> out;
  std::vector<double> slot_max;  // per slot (micro sync): its slowest rank's micro-batch
  for (size_t t = win.first; t < win.end; ++t) {
    StepBars s;
    s.step = t;
    s.ranks.resize(W);
    slot_max.clear();
    for (size_t r = 0; r < W; ++r) {
      const auto [m0, m1] = plan.rank_range(t, int(r));
      RankBar& b = s.ranks[r];
      b.mbs = int64_t(m1 - m0);
      for (uint64_t i = m0; i < m1; ++i) {
        const double x = time_of(i, r);
        const MicroBatch& mb = plan.micro_batches[i];
        b.compute += x;
        if (mb.padded) b.padded += x;
        b.samples += mb.count;
        if (slot_max.size() <= i - m0) slot_max.resize(i - m0 + 1, 0.0);
        slot_max[i - m0] = std::max(slot_max[i - m0], x);
      }
      if (!micro) s.top = std::max(s.top, b.compute);
    }
    if (micro)
      for (double x : slot_max) s.top += x;
    for (size_t r = 0; r < W; ++r) {
      const auto [m0, m1] = plan.rank_range(t, int(r));
      RankBar& b = s.ranks[r];
      for (uint64_t i = m0; i < m1; ++i) {
        const double x = time_of(i, r);
        b.segments.push_back(
            {x, plan.micro_batches[i].padded ? kPadded : ((i - m0) % 2 ? kBusyB : kBusyA)});
        if (micro) b.segments.push_back({slot_max[i - m0] - x, kIdle});
      }
      b.idle = s.top - b.compute;
      if (!micro) b.segments.push_back({b.idle, kIdle});
    }
    out.push_back(std::move(s));
  }
  return out;
}

size_t ranks_per_bar(size_t world_size, size_t steps) {
  auto fits = [&](size_t k, double px) {
    return double(steps) * double((world_size + k - 1) / k) * px <= kStepPlotWidth;
  };
  if (fits(1, kMinBarPx)) return 1;
  size_t k = 2;
  while (k < world_size && !fits(k, kMinBinPx)) k *= 2;
  return std::min(k, world_size);
}

ReportChart step_chart(const Plan& plan, const Metrics& m, const std::vector<StepBars>& bars,
                       const StepWindow& win, double y_max) {
  const size_t W = size_t(plan.world_size);
  const bool micro = lockstep_slots(plan.sync);
  const size_t k = ranks_per_bar(W, bars.size());
  SvgBarChart c;
  c.id = "steps-" + chart_slug(m.name);
  c.title = "Per-rank time per step: " + m.name;
  c.x_label = "global step";
  c.y_label = "seconds";
  c.bar_class = "rank";
  c.y_max = y_max;
  c.group_separators = true;
  const SvgLegendItem idle{
      micro ? "idle (waits for each slot's slowest rank)" : "idle (waits for the slowest rank)",
      kIdle};
  if (k == 1)
    c.legend = {{"busy (micro-batches in alternating shades)", kBusyA}, idle};
  else
    c.legend = {{"busy (bin mean)", kBusyA}, {"min-max busy", kRangeColor, false, true}, idle};
  double busy = 0, span = 0;
  bool any_padded = false;
  for (const StepBars& s : bars) {
    SvgBarGroup g;
    g.label = std::to_string(s.step);
    for (size_t r0 = 0; r0 < W; r0 += k) {
      const size_t r1 = std::min(W, r0 + k);
      SvgBar b;
      if (k == 1) {
        const RankBar& x = s.ranks[r0];
        b.segments = x.segments;
        b.title = "step " + std::to_string(s.step) + ", rank " + std::to_string(r0) + ": busy " +
                  fmt("%.3f", x.compute) + " s (" + std::to_string(x.mbs) + " micro-batches, " +
                  std::to_string(x.samples) + " samples), idle " + fmt("%.3f", x.idle) + " s";
      } else {
        // A bin: the mean of its ranks, and a whisker from the least to the most busy.
        double compute = 0, padded = 0, idle_sum = 0, lo = 1e300, hi = -1;
        size_t r_lo = r0, r_hi = r0;
        int64_t mbs = 0, samples = 0;
        for (size_t r = r0; r < r1; ++r) {
          const RankBar& x = s.ranks[r];
          compute += x.compute, padded += x.padded, idle_sum += x.idle;
          mbs += x.mbs, samples += x.samples;
          if (x.compute < lo) lo = x.compute, r_lo = r;
          if (x.compute > hi) hi = x.compute, r_hi = r;
        }
        const double n = double(r1 - r0);
        b.segments = {
            {(compute - padded) / n, kBusyA}, {padded / n, kPadded}, {idle_sum / n, kIdle}};
        b.range_lo = lo, b.range_hi = hi;
        b.title = "step " + std::to_string(s.step) + ", ranks " + std::to_string(r0) + "-" +
                  std::to_string(r1 - 1) + ": busy mean " + fmt("%.3f", compute / n) + " s, min " +
                  fmt("%.3f", lo) + " s (rank " + std::to_string(r_lo) + "), max " +
                  fmt("%.3f", hi) + " s (rank " + std::to_string(r_hi) + "); idle mean " +
                  fmt("%.3f", idle_sum / n) + " s; " + std::to_string(mbs) + " micro-batches, " +
                  std::to_string(samples) + " samples";
      }
      g.bars.push_back(std::move(b));
    }
    for (const RankBar& x : s.ranks) busy += x.compute, any_padded |= x.padded > 0;
    span += s.top * double(W);
    c.groups.push_back(std::move(g));
  }
  if (any_padded) c.legend.insert(c.legend.begin() + 1, {"padded repeats", kPadded});
  if (bars.empty()) {
    c.subtitle =
        "no steps in the window: the plan has " + std::to_string(plan.num_steps()) + " steps";
  } else {
    c.subtitle = (win.end - win.first == 1
                      ? "step " + std::to_string(win.first)
                      : "steps " + std::to_string(win.first) + "-" + std::to_string(win.end - 1)) +
                 " of " + thousands(int64_t(plan.num_steps())) + ", " + thousands(int64_t(W)) +
                 " ranks" +
                 (k > 1 ? " in bins of " + std::to_string(k) +
                              " (bar: the bin's mean, line: its least to most busy rank)"
                        : "") +
                 "; idle in this window " + fmt("%.1f%%", span > 0 ? 100 * (1 - busy / span) : 0) +
                 " of GPU time, epoch imbalance " + fmt("%.1f%%", 100 * m.imbalance);
  }
  c.width = kStepChartWidth;
  c.height = 360;
  return {c.id, c.title, render_bar_chart(c)};
}

}  // namespace adaptiveload
