#pragma once
// The report's per-rank charts (html_report.h): for each plan a window of global steps, one
// bar per rank (or per bin of consecutive ranks past about 560 bars) stacking its busy time
// and its idle time up to the step's slowest rank (step sync) or, slot by slot, up to each
// micro-batch slot's slowest rank (micro sync). Used by build_report only.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "adaptiveload/planner/planner.h"
#include "adaptiveload/report/html_report.h"
#include "adaptiveload/report/svg_chart.h"

namespace adaptiveload {

struct StepWindow {
  size_t first = 0, end = 0;
};

// The steps [first, end) a chart shows: ReportOptions' first_step and steps, clamped to the plan.
StepWindow step_window(const Plan& p, const ReportOptions& o);

// One rank's bar in one step: its micro-batches and the time it waits for the slowest rank:
// of the step (step sync, on top) or of each slot (micro sync, after each micro-batch).
struct RankBar {
  std::vector<SvgSegment> segments;  // bottom-up, seconds
  double compute = 0;                // sum of its micro-batches (rank_times)
  double padded = 0;                 // of which padded repeats
  double idle = 0;
  int64_t mbs = 0, samples = 0;
};

struct StepBars {
  size_t step = 0;
  // The step's compute span, where every bar ends: the slowest rank's compute (step sync) or
  // the sum over slots of the slowest rank's micro-batch (micro sync); collectives excluded.
  double top = 0;
  std::vector<RankBar> ranks;
};

std::vector<StepBars> window_bars(const Planner& planner, const Plan& plan, const StepWindow& win);

// Every per-rank chart is at most this wide (the page's width). Where one bar per rank would
// be under kMinBarPx wide, consecutive ranks are drawn as one bar per bin, wide enough
// (kMinBinPx) for its min-max whisker to be read.
constexpr int kStepChartWidth = 1200;
constexpr double kStepPlotWidth = kStepChartWidth - 80;  // render_bar_chart's margins
constexpr double kMinBarPx = 2, kMinBinPx = 8;

// Ranks per bar: 1, or the smallest power of two whose bins fit the chart at kMinBinPx.
size_t ranks_per_bar(size_t world_size, size_t steps);

// The chart of one plan's window; `y_max`: the seconds axis shared by every strategy's chart.
ReportChart step_chart(const Plan& plan, const Metrics& m, const std::vector<StepBars>& bars,
                       const StepWindow& win, double y_max);

}  // namespace adaptiveload
