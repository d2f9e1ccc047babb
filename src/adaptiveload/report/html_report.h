#pragma once
// The `adaptiveload report` page: one self-contained HTML file (inline SVG and CSS, no
// scripts, no network) built from a Planner, its plans and their simulated metrics:
//   - inputs and budgets (as in `plan`'s table header);
//   - the summary table of DESIGN.md's metrics, one row per strategy;
//   - the bucket histogram: samples and tokens per bucket;
//   - the cost model c(S): seconds per sample vs tokens, over the buckets in use and a smooth
//     range, with the planner's profile's calibrated points when it has "points"
//     (Planner::profile: the file is read once, by the planner);
//   - per strategy (and per `balanced g=G` row), a window of steps: each rank's busy time
//     (micro-batches in alternating shades) and its idle time up to the step's slowest rank
//     (step sync) or, slot by slot, up to each micro-batch slot's slowest rank (micro sync);
//     past about 560 bars, consecutive ranks in bins (mean and a min-max whisker), so the
//     chart stays 1,200 px wide at any world size.
// Every text follows the plan's sync mode; with sequence parallelism the inputs say the
// policy, the allowed group sizes and the sizes each plan used (the table's g column).
// Pure C++ string building; the CLI (cli/cmd_report.cpp) only wires options and files.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/planner/planner.h"

namespace adaptiveload {

struct ReportOptions {
  std::string title = "AdaptiveLoad report";
  int64_t first_step = 0;  // first global step of the per-rank windows
  int64_t steps = 24;      // steps per window
  // Machine-readable copy of the comparison (e.g. the CLI's comparison_json), embedded as
  // <script type="application/json" id="al-data">; data only, nothing runs. "" = none.
  std::string data_json;
};

struct ReportChart {
  std::string id;  // "buckets-samples", "buckets-tokens", "cost", "steps-<strategy>"
  std::string title;
  std::string svg;  // standalone <svg> document text
};

struct Report {
  std::string html;
  std::vector<ReportChart> charts;  // in page order
};

// `plans[i]` and `metrics[i]` belong to the same strategy; `manifest` (may be null) names
// the input files.
Report build_report(const Planner& planner, const Manifest* manifest,
                    const std::vector<Plan>& plans, const std::vector<Metrics>& metrics,
                    const ReportOptions& options);

}  // namespace adaptiveload
