// The HTML report: SVG helpers, the page built from the real Taichi-HD + COCO manifests
// (parsed structurally: one <svg> per chart, one bar group per rank per step, the summary
// rows of every strategy with the numbers of `plan --json`), the CLI, and a Chromium
// screenshot when Chromium is installed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "adaptiveload/planner/planner.h"
#include "adaptiveload/report/html_report.h"
#include "adaptiveload/report/svg_chart.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "test_paths.h"
#include "test_support.h"

using adaptiveload::test::cli_path;
using adaptiveload::test::data_dir;

namespace fs = std::filesystem;
using namespace adaptiveload;
using json = nlohmann::json;

namespace {

const std::string kDatasets = data_dir();
const std::string kCli = cli_path();
const std::string kTaichi = kDatasets + "/taichi_hd.csv";
const std::string kCoco = kDatasets + "/coco2017_val_images.csv";

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

std::string read_text(const fs::path& p) { return adaptiveload::test::read_text(p.string()); }

using Exec = adaptiveload::test::CommandResult;

Exec run(const std::string& cmd) { return adaptiveload::test::run_command(cmd); }

// Every element opened is closed in order (void HTML elements and <!...> aside): enough to
// catch broken markup from string building.
std::string check_balanced(const std::string& doc) {
  static const std::regex tag(R"(<(/?)([A-Za-z][A-Za-z0-9-]*)[^>]*?(/?)>)");
  std::vector<std::string> stack;
  for (std::sregex_iterator it(doc.begin(), doc.end(), tag), end; it != end; ++it) {
    const std::string name = (*it)[2];
    if (name == "meta" || name == "br") continue;
    if ((*it)[3] == "/") continue;  // self-closing
    if ((*it)[1] == "/") {
      if (stack.empty() || stack.back() != name)
        return "</" + name + "> closes <" +
               (stack.empty() ? std::string("nothing") : stack.back()) + "> at offset " +
               std::to_string(it->position());
      stack.pop_back();
    } else {
      stack.push_back(name);
    }
  }
  return stack.empty() ? "" : "<" + stack.back() + "> never closed";
}

// The <svg>...</svg> element with this id.
std::string svg_by_id(const std::string& html, const std::string& id) {
  const size_t at = html.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const size_t begin = html.rfind("<svg", at);
  const size_t end = html.find("</svg>", at);
  return html.substr(begin, end + 6 - begin);
}

// data-value of a summary cell.
double cell(const std::string& html, const std::string& strategy, const std::string& key) {
  const size_t row = html.find("<tr data-strategy=\"" + strategy + "\">");
  if (row == std::string::npos) return NAN;
  const size_t row_end = html.find("</tr>", row);
  const size_t c = html.find("data-key=\"" + key + "\" data-value=\"", row);
  if (c == std::string::npos || c > row_end) return NAN;
  return std::strtod(html.c_str() + html.find("data-value=\"", c) + 12, nullptr);
}

class RealManifests : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(kTaichi) || !fs::exists(kCoco)) return;
    manifest_ = new Manifest;
    manifest_->load(kTaichi, BadRowPolicy::kError);
    manifest_->load(kCoco, BadRowPolicy::kError);
    PlannerConfig cfg;
    cfg.oversize = OversizePolicy::kSkip;
    planner_ = new Planner(*manifest_, cfg);
    for (const auto& s : strategies()) {
      if (s.packs()) continue;  // the comparison without --packing on
      plans_.push_back(planner_->plan(s.name));
      metrics_.push_back(planner_->simulate(plans_.back()));
    }
    report_ = new Report(build_report(*planner_, manifest_, plans_, metrics_, ReportOptions{}));
  }
  static void TearDownTestSuite() {
    delete report_;
    delete planner_;
    delete manifest_;
    plans_.clear();
    metrics_.clear();
  }
  void SetUp() override {
    if (!manifest_) GTEST_SKIP() << "shared datasets not found under " << kDatasets;
  }
  static Manifest* manifest_;
  static Planner* planner_;
  static std::vector<Plan> plans_;
  static std::vector<Metrics> metrics_;
  static Report* report_;
};
Manifest* RealManifests::manifest_ = nullptr;
Planner* RealManifests::planner_ = nullptr;
std::vector<Plan> RealManifests::plans_;
std::vector<Metrics> RealManifests::metrics_;
Report* RealManifests::report_ = nullptr;

TEST(SvgChart, Ticks) {
  EXPECT_EQ(linear_ticks(0, 37.6, 5), (std::vector<double>{0, 10, 20, 30}));
  EXPECT_FALSE(std::signbit(linear_ticks(0, 1.5e8, 5).front())) << "a '-0' tick label";
  const std::vector<double> fifths = linear_ticks(0, 1, 5);
  ASSERT_EQ(fifths.size(), 6u);
  for (size_t i = 0; i < fifths.size(); ++i) EXPECT_NEAR(fifths[i], 0.2 * double(i), 1e-12);
  EXPECT_EQ(log_ticks(300, 20000), (std::vector<double>{500, 1000, 2000, 5000, 10000, 20000}));
  EXPECT_EQ(log_ticks(300, 120000),
            (std::vector<double>{500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}));
  EXPECT_EQ(log_ticks(0.001, 1e6).size(), 10u);  // wide: decades only
  EXPECT_EQ(log_ticks(0.001, 1000).size(), 7u);
  EXPECT_EQ(tick_label(32760), "32.76K");
  EXPECT_EQ(tick_label(2e6), "2M");
  EXPECT_EQ(tick_label(0.25), "0.25");
  EXPECT_EQ(xml_escape("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
}

TEST(SvgChart, BarChartHasOneGroupPerBarAndEscapesText) {
  SvgBarChart c;
  c.id = "t";
  c.title = "A <title>";
  for (int g = 0; g < 3; ++g) {
    SvgBarGroup grp{"g" + std::to_string(g), {}};
    for (int b = 0; b < 4; ++b)
      grp.bars.push_back({{{1.0 + b, "#000"}, {0.5, "#f00"}, {0, "#0f0"}}, "bar & tip"});
    c.groups.push_back(grp);
  }
  const std::string svg = render_bar_chart(c);
  EXPECT_EQ(count(svg, "<g class=\"bar\""), 12u);
  EXPECT_EQ(count(svg, "fill=\"#000\""), 12u);
  EXPECT_EQ(count(svg, "fill=\"#0f0\""), 0u) << "zero segments draw nothing";
  EXPECT_NE(svg.find("A &lt;title&gt;"), std::string::npos);
  EXPECT_NE(svg.find("<title>bar &amp; tip</title>"), std::string::npos);
  EXPECT_EQ(check_balanced(svg), "");
}

TEST(SvgChart, BarRangeDrawsAWhiskerAndScalesTheAxis) {
  SvgBarChart c;
  SvgBarGroup g{"g", {}};
  g.bars.push_back({{{1.0, "#000"}}, "flat"});
  SvgBar b{{{1.0, "#000"}}, "spread"};
  b.range_lo = 0.5, b.range_hi = 7.5;
  g.bars.push_back(b);
  c.groups.push_back(g);
  const std::string svg = render_bar_chart(c);
  EXPECT_EQ(count(svg, "class=\"range\""), 1u) << "only a bar with range_hi > range_lo";
  EXPECT_NE(svg.find(">8</text>"), std::string::npos) << "the y axis reaches the whisker's top";
  EXPECT_EQ(check_balanced(svg), "");
}

TEST(SvgChart, LineChartDropsPointsALogAxisCannotShow) {
  SvgLineChart c;
  c.log_x = c.log_y = true;
  c.series.push_back({"s", "#00f", {1, 10, 100, -1, 1000}, {1, 2, 0, 3, 4}, true, true, {}, "pt"});
  const std::string svg = render_line_chart(c);
  EXPECT_EQ(count(svg, "class=\"pt\""), 3u);
  EXPECT_EQ(count(svg, "<polyline"), 1u);
  EXPECT_EQ(check_balanced(svg), "");
}

TEST_F(RealManifests, OneSvgPerChartAndWellFormed) {
  const std::string& html = report_->html;
  EXPECT_LT(html.size(), 2u << 20) << "report over 2 MB";
  ASSERT_EQ(report_->charts.size(), 3 + plans_.size());
  EXPECT_EQ(count(html, "<svg "), report_->charts.size());
  for (const auto& c : report_->charts) {
    EXPECT_NE(svg_by_id(html, c.id), "") << c.id;
    EXPECT_EQ(count(c.svg, "<svg "), 1u) << c.id;
    EXPECT_EQ(check_balanced(c.svg), "") << c.id;
  }
  EXPECT_EQ(check_balanced(html), "");
  // Self-contained: no scripts that run, no links, nothing fetched.
  EXPECT_EQ(count(html, "<script"), 0u);
  EXPECT_EQ(count(html, "src="), 0u);
  EXPECT_EQ(count(html, "href="), 0u);
  EXPECT_EQ(count(html, "http"), count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
}

TEST_F(RealManifests, BucketHistogramHasEveryBucketInUse) {
  const Bucketing& bk = planner_->bucketing();
  size_t used = 0;
  for (int64_t n : bk.bucket_counts) used += n > 0;
  for (const char* id : {"buckets-samples", "buckets-tokens"}) {
    const std::string svg = svg_by_id(report_->html, id);
    EXPECT_EQ(count(svg, "<g class=\"bucket\""), used) << id;
  }
  // The biggest bucket's hover text carries its exact counts.
  size_t top = 0;
  for (size_t b = 0; b < bk.buckets.size(); ++b)
    if (bk.bucket_counts[b] > bk.bucket_counts[top]) top = b;
  EXPECT_NE(report_->html.find(bk.buckets[top].name() + ": "), std::string::npos);
}

TEST_F(RealManifests, OneBarGroupPerRankPerStep) {
  const int W = planner_->config().world_size;
  for (size_t i = 0; i < plans_.size(); ++i) {
    const std::string svg = svg_by_id(report_->html, "steps-" + plans_[i].strategy);
    ASSERT_FALSE(svg.empty()) << plans_[i].strategy;
    const size_t steps = std::min<size_t>(24, plans_[i].num_steps());
    EXPECT_EQ(count(svg, "<g class=\"rank\""), steps * size_t(W)) << plans_[i].strategy;
    for (size_t t = 0; t < steps; ++t)
      for (int r = 0; r < W; ++r)
        ASSERT_NE(svg.find("<g class=\"rank\" data-group=\"" + std::to_string(t) +
                           "\" data-bar=\"" + std::to_string(r) + "\""),
                  std::string::npos)
            << plans_[i].strategy << " step " << t << " rank " << r;
    // The busy times of the hover texts are rank_times' numbers.
    const std::vector<double> T = rank_times(plans_[i], planner_->sim_env(W));
    char tip[96];
    std::snprintf(tip, sizeof tip, "step 3, rank 5: busy %.3f s", T[3 * size_t(W) + 5]);
    EXPECT_NE(svg.find(tip), std::string::npos) << tip;
  }
  // equal_tokens leaves ranks idle in its first steps: idle bars are drawn.
  EXPECT_GT(count(svg_by_id(report_->html, "steps-equal_tokens"), "fill=\"#f0a04b\""), 10u);
}

TEST_F(RealManifests, WindowFollowsFirstStepAndSteps) {
  ReportOptions o;
  o.first_step = 90;
  o.steps = 5;
  const Report r = build_report(*planner_, manifest_, plans_, metrics_, o);
  const int W = planner_->config().world_size;
  for (const Plan& p : plans_) {
    const size_t n = p.num_steps() > 90 ? std::min<size_t>(5, p.num_steps() - 90) : 0;
    const std::string svg = svg_by_id(r.html, "steps-" + p.strategy);
    EXPECT_EQ(count(svg, "<g class=\"rank\""), n * size_t(W)) << p.strategy;
    if (n) {
      EXPECT_NE(svg.find("data-group=\"0\" data-bar=\"0\"><title>step 90,"), std::string::npos)
          << p.strategy;
    }
  }
}

TEST_F(RealManifests, SummaryRowsMatchTheMetrics) {
  ASSERT_EQ(count(report_->html, "<tr data-strategy="), 4u);
  for (const Metrics& m : metrics_) {
    EXPECT_DOUBLE_EQ(cell(report_->html, m.name, "imbalance"), m.imbalance) << m.name;
    EXPECT_DOUBLE_EQ(cell(report_->html, m.name, "throughput_samples_per_s"),
                     m.throughput_samples_per_s)
        << m.name;
    EXPECT_DOUBLE_EQ(cell(report_->html, m.name, "peak_memory_utilization_max"),
                     m.peak_memory_utilization_max);
    EXPECT_DOUBLE_EQ(cell(report_->html, m.name, "steps"), double(m.steps)) << m.name;
  }
}

TEST_F(RealManifests, CostCurveShowsBucketsAndCalibratedPoints) {
  const std::string svg = svg_by_id(report_->html, "cost");
  size_t used = 0;
  for (int64_t n : planner_->bucketing().bucket_counts) used += n > 0;
  EXPECT_EQ(count(svg, "class=\"bucket\""), used);
  EXPECT_EQ(count(svg, "class=\"calibrated\""), 0u);
  EXPECT_EQ(count(svg, "<polyline"), 1u);

  const fs::path prof =
      fs::temp_directory_path() / ("al_report_profile_" + std::to_string(getpid()) + ".json");
  {
    std::ofstream f(prof);
    f << R"({"format": "adaptiveload-profile", "version": 1, "cost": {"a": 1e-5, "b": 1e-10, "c0": 0},
             "points": [{"tokens": 1560, "batch": 8, "time_s": 0.4}, {"tokens": 32760, "batch": 1, "time_s": 1.5},
                        {"tokens": 75600, "batch": 1, "time_s": 6.0}]})";
  }
  const auto pts = load_profile(prof.string()).points;
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_DOUBLE_EQ(pts[0].second, 0.05);
  // The report plots the points of the profile its planner read (Planner::profile), with no
  // path of its own: the file is parsed once.
  PlannerConfig cfg;
  cfg.oversize = OversizePolicy::kSkip;
  cfg.cost_model = "profile", cfg.profile = prof.string();
  const Planner with_profile(*manifest_, cfg);
  ASSERT_NE(with_profile.profile(), nullptr);
  EXPECT_EQ(with_profile.profile()->points, pts);
  const Plan p = with_profile.plan("equal_tokens");
  const Report r =
      build_report(with_profile, manifest_, {p}, {with_profile.simulate(p)}, ReportOptions{});
  EXPECT_EQ(count(svg_by_id(r.html, "cost"), "class=\"calibrated\""), 3u);
  {
    std::ofstream f(prof);
    f << R"({"format": "adaptiveload-profile", "version": 1, "cost": {"a": 1e-5, "b": 1e-10, "c0": 0},
             "points": [{"tokens": 1560, "batch": 0, "time_s": 0.4}]})";
  }
  EXPECT_THROW(Planner(*manifest_, cfg), InputError);  // the one read refuses it, before any report
  try {
    load_profile(prof.string());
    ADD_FAILURE() << "a zero batch must be rejected";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("points[0]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("batch"), std::string::npos) << e.what();
  }
  fs::remove(prof);
}

// ---- Small in-memory inputs: the sync modes, the table's columns, sequence parallelism and
// the per-rank charts at many ranks (docs/scan_report.md, "report").

// `rows` rows, 3 in 5 of them clips (33-121 frames, 480p to 1080p, 16 fps), the rest images:
// plans in milliseconds on any world size. For Wan 2.1 14B on the wan-long grid its 1080p
// 121-frame clips need a sequence-parallel group of 2 GPUs.
std::string small_mix_csv(int rows) {
  static const int kFrames[] = {33, 49, 81, 121};
  static const int kClip[][2] = {{480, 832}, {720, 1280}, {1080, 1920}};
  static const int kImage[][2] = {{512, 512}, {768, 1024}, {1024, 768}};
  std::string text = "path,num_frames,height,width,fps\n";
  for (int k = 0; k < rows; ++k) {
    if (k % 5 < 3) {
      const auto& hw = kClip[(k / 4) % 3];
      text += "c" + std::to_string(k) + ".mp4," + std::to_string(kFrames[k % 4]) + "," +
              std::to_string(hw[0]) + "," + std::to_string(hw[1]) + ",16\n";
    } else {
      const auto& hw = kImage[k % 3];
      text += "i" + std::to_string(k) + ".jpg,1," + std::to_string(hw[0]) + "," +
              std::to_string(hw[1]) + ",\n";
    }
  }
  return text;
}

Manifest small_mix(int rows) {
  Manifest m;
  m.load_text(small_mix_csv(rows), "small_mix.csv", BadRowPolicy::kError);
  return m;
}

struct Built {
  std::vector<Plan> plans;
  std::vector<Metrics> metrics;
  Report report;
};

// The report of `names` (all strategies when empty), plus balanced on each fixed group size
// named "balanced g=G" when `fixed_groups` (as the CLI's compare() adds them).
Built build(const Planner& pl, const Manifest& m, std::vector<std::string> names = {},
            bool fixed_groups = false, ReportOptions o = {}) {
  Built b;
  if (names.empty())  // the comparison's: the packers only with packing on
    for (const auto& s : strategies())
      if (!s.packs() || pl.packing()) names.push_back(s.name);
  for (const auto& n : names) {
    b.plans.push_back(pl.plan(n));
    b.metrics.push_back(pl.simulate(b.plans.back()));
  }
  if (fixed_groups)
    for (int g = pl.max_group(); g <= kMaxGroup; g *= 2) {
      if (!pl.seq_parallel().allows(g)) continue;
      b.plans.push_back(pl.plan_fixed_group("balanced", g));
      b.metrics.push_back(pl.simulate(b.plans.back()));
      b.metrics.back().name = "balanced g=" + std::to_string(g);
    }
  b.report = build_report(pl, &m, b.plans, b.metrics, o);
  return b;
}

PlannerConfig small_config(int world_size, const std::string& sharding = "none",
                           const std::string& sync = "auto") {
  PlannerConfig c;
  c.world_size = world_size;
  c.sharding = sharding;
  c.sync = sync;
  return c;
}

PlannerConfig sp_config() {  // some samples need a group of 2 (sequence parallelism auto)
  PlannerConfig c = small_config(16, "fsdp");
  c.model = "wan2.1-14b";
  c.grid = "wan-long";
  return c;
}

// The text of a summary cell.
std::string cell_text(const std::string& html, const std::string& strategy,
                      const std::string& key) {
  const size_t row = html.find("<tr data-strategy=\"" + strategy + "\">");
  if (row == std::string::npos) return "(no row)";
  const size_t c = html.find("data-key=\"" + key + "\"", row);
  if (c == std::string::npos || c > html.find("</tr>", row)) return "(no cell)";
  const size_t from = html.find('>', c) + 1;
  return html.substr(from, html.find("</td>", from) - from);
}

std::string svg_width(const std::string& svg) {
  std::smatch m;
  return std::regex_search(svg, m, std::regex("<svg [^>]*width=\"([0-9]+)\"")) ? m[1].str() : "";
}

// Every text of the page follows the plan's sync mode: micro sync (FSDP) never speaks of a
// per-step all-reduce, step sync (DDP) never of slots and reduce-scatters.
TEST(ReportSync, TextsFollowTheSyncMode) {
  const Manifest m = small_mix(400);
  const Planner micro(m, small_config(8, "fsdp"));
  ASSERT_EQ(micro.sync(), SyncMode::kMicro);
  const std::string html = build(micro, m).report.html;
  EXPECT_EQ(count(html, "all-reduce"), 0u) << "micro sync has no gradient all-reduce";
  EXPECT_EQ(count(html, "one gradient all-reduce per step"), 0u);
  EXPECT_EQ(count(html, "waits at the gradient all-reduce"), 0u);
  EXPECT_NE(html.find("<b>micro sync</b> (auto; FSDP"), std::string::npos);
  EXPECT_NE(html.find("every micro-batch slot runs a parameter all-gather in forward, another in "
                      "backward and a gradient reduce-scatter"),
            std::string::npos);
  EXPECT_NE(html.find("all ranks run the same number of micro-batches per step"),
            std::string::npos);
  EXPECT_NE(html.find("the sum over its slots of the slowest rank's micro-batch plus the "
                      "collectives' exposed time"),
            std::string::npos);
  EXPECT_NE(html.find("waits for that slot's slowest rank"), std::string::npos);
  EXPECT_EQ(count(html, xml_escape("idle (waits for each slot's slowest rank)")), 4u)
      << "each chart's legend";
  EXPECT_EQ(check_balanced(html), "");

  // Micro sync without sharded parameters (ZeRO-2): only the reduce-scatter.
  const Planner zero2(m, small_config(8, "none", "micro"));
  const std::string z = build(zero2, m, {"balanced"}).report.html;
  EXPECT_NE(z.find("every micro-batch slot runs a gradient reduce-scatter,"), std::string::npos);
  EXPECT_EQ(count(z, "all-gather"), 0u);
  EXPECT_EQ(count(z, "all-reduce"), 0u);

  const Planner step(m, small_config(8));
  ASSERT_EQ(step.sync(), SyncMode::kStep);
  const std::string d = build(step, m).report.html;
  EXPECT_NE(d.find("one gradient all-reduce per step"), std::string::npos);
  EXPECT_NE(d.find("waits for the step's slowest rank before the step's gradient all-reduce"),
            std::string::npos);
  for (const char* micro_only : {"reduce-scatter", "all-gather", "slot", "same number of"})
    EXPECT_EQ(count(d, micro_only), 0u) << micro_only;
}

// In micro sync a rank waits in every slot for that slot's slowest rank, so each bar ends at the
// sum over slots of the slowest micro-batch: over the epoch, the simulated epoch time less its
// exposed collectives (not at the busiest rank's total, as in step sync).
TEST(ReportSync, MicroSyncBarsWaitInEverySlot) {
  const Manifest m = small_mix(400);
  const Planner pl(m, small_config(8, "fsdp"));
  ReportOptions o;
  o.steps = 1000;  // the whole epoch
  const Built b = build(pl, m, {"equal_tokens", "fixed", "balanced"}, false, o);
  const std::regex tip(R"(step (\d+), rank (\d+): busy ([0-9.]+) s \([^)]*\), idle ([0-9.]+) s)");
  for (size_t i = 0; i < b.plans.size(); ++i) {
    const Metrics& mt = b.metrics[i];
    const std::string svg = svg_by_id(b.report.html, "steps-" + mt.name);
    std::map<int, double> top;  // step -> busy + idle of its rank 0
    double slack = 0;           // largest disagreement within a step
    for (std::sregex_iterator it(svg.begin(), svg.end(), tip), end; it != end; ++it) {
      const int t = std::stoi((*it)[1]);
      const double x = std::stod((*it)[3]) + std::stod((*it)[4]);
      if (!top.count(t)) top[t] = x;
      slack = std::max(slack, std::abs(top[t] - x));
    }
    ASSERT_EQ(top.size(), b.plans[i].num_steps()) << mt.name;
    EXPECT_LE(slack, 0.0021) << mt.name << ": every bar of a step ends at the same height";
    double sum = 0;
    for (const auto& [t, x] : top) sum += x;
    EXPECT_NEAR(sum, mt.epoch_time_s - mt.collective_s, 0.001 * double(top.size()) + 1e-6)
        << mt.name;
  }
  EXPECT_GT(b.metrics[1].micro_batches_per_rank_step, 1.5) << "fixed runs several slots a step";
}

// The table has plan's `batch` (samples per global step, mean) and `g` (group sizes used)
// columns, in plan's order and formats.
TEST(ReportTable, HasBatchAndGroupColumns) {
  const Manifest m = small_mix(400);
  const Planner pl(m, sp_config());
  const Built b = build(pl, m, {}, true);
  const std::string& html = b.report.html;
  EXPECT_NE(html.find("<th>steps</th><th>batch</th><th>mb/rank</th>"), std::string::npos);
  EXPECT_NE(html.find("<th>epoch s</th><th>g</th><th>padded</th>"), std::string::npos);
  bool mixed = false;
  for (const Metrics& mt : b.metrics) {
    EXPECT_DOUBLE_EQ(cell(html, mt.name, "global_batch_samples_mean"), mt.global_batch_samples_mean)
        << mt.name;
    char batch[32];
    std::snprintf(batch, sizeof batch, "%.1f", mt.global_batch_samples_mean);
    EXPECT_EQ(cell_text(html, mt.name, "global_batch_samples_mean"), batch) << mt.name;
    EXPECT_DOUBLE_EQ(cell(html, mt.name, "group_max"), mt.group_max) << mt.name;
    const std::string g = mt.group_min == mt.group_max
                              ? std::to_string(mt.group_max)
                              : std::to_string(mt.group_min) + "-" + std::to_string(mt.group_max);
    EXPECT_EQ(cell_text(html, mt.name, "group_max"), g) << mt.name;
    mixed |= mt.group_max > 1;
  }
  EXPECT_TRUE(mixed) << "the input should need groups";
  EXPECT_EQ(cell_text(html, "equal_tokens", "group_max"), "2");
  EXPECT_EQ(cell_text(html, "balanced g=4", "group_max"), "4");
}

// With sequence parallelism in use the page says the policy, the allowed sizes, the samples per
// group size and the sizes the plans used, and explains the `balanced g=G` rows; each of them
// gets its own per-rank chart.
TEST(ReportSp, SequenceParallelLineAndFixedGroupRows) {
  const Manifest m = small_mix(400);
  const Planner pl(m, sp_config());
  ASSERT_EQ(pl.max_group(), 2);
  const Built b = build(pl, m, {}, true);
  const std::string& html = b.report.html;
  int64_t on2 = 0, on1 = 0;
  for (size_t k = 0; k < pl.bucketing().buckets.size(); ++k)
    (pl.bucket_groups()[k] == 2 ? on2 : on1) += pl.bucketing().bucket_counts[k];
  ASSERT_GT(on2, 0);
  EXPECT_NE(html.find("<li>sequence parallelism (Ulysses): policy <b>auto</b>"), std::string::npos);
  EXPECT_NE(html.find("allowed group sizes 1,2,4,8 (usable on 16 x h200: 1,2,4,8)"),
            std::string::npos);
  EXPECT_NE(html.find("samples on g GPUs: g=1 " + std::to_string(on1) + " g=2 " +
                      std::to_string(on2) + ";"),
            std::string::npos);
  // Each size once, with the strategies whose plans use it, by the smallest size: balanced's
  // own (per-sample groups: what its search found fastest) leads where it mixes g=1 in.
  const std::string used = "group sizes used (column g): ";
  const size_t at = html.find(used);
  ASSERT_NE(at, std::string::npos);
  const std::string line = html.substr(at, html.find('.', at) - at);
  const std::string own =
      "g=" + cell_text(html, "balanced", "group_max");  // the column g: "1-4", "8"
  EXPECT_NE(line.find("g=2 by equal_tokens, fixed, dual, balanced g=2"), std::string::npos) << line;
  EXPECT_NE(line.find(own + " by balanced"), std::string::npos) << line;
  EXPECT_NE(line.find("g=4 by balanced g=4"), std::string::npos) << line;
  EXPECT_NE(html.find("equal_tokens, fixed and dual run every sample on g=2"), std::string::npos);
  EXPECT_NE(html.find("balanced g=G: balanced with every sample on a fixed group of G GPUs"),
            std::string::npos);
  EXPECT_NE(html.find("shown for comparison beside balanced with per-sample groups"),
            std::string::npos);
  ASSERT_EQ(count(html, "<tr data-strategy=\"balanced g="), 3u);
  // One chart per row, each its own id (the plans of the g=G rows are all "balanced").
  ASSERT_EQ(b.report.charts.size(), 3 + b.metrics.size());
  for (const ReportChart& c : b.report.charts)
    EXPECT_EQ(count(html, "id=\"" + c.id + "\""), 1u) << c.id;
  for (const char* id :
       {"steps-balanced", "steps-balanced-g2", "steps-balanced-g4", "steps-balanced-g8"})
    EXPECT_NE(svg_by_id(html, id), "") << id;
  EXPECT_NE(svg_by_id(html, "steps-balanced-g4").find("Per-rank time per step: balanced g=4"),
            std::string::npos);

  // One fixed size for all (--sp 2): said as such.
  PlannerConfig c2 = small_config(8);
  c2.sp = "2";
  const Planner p2(m, c2);
  const std::string h2 = build(p2, m, {"equal_tokens", "balanced"}).report.html;
  EXPECT_NE(h2.find("policy <b>2</b> (every sample on 2 GPUs)"), std::string::npos);
  EXPECT_NE(h2.find("every strategy runs every sample on g=2"), std::string::npos);
  EXPECT_EQ(count(h2, "balanced g=G"), 0u) << "no such rows here";
  // No groups: no line.
  const Planner p1(m, small_config(8));
  EXPECT_EQ(count(build(p1, m, {"balanced"}).report.html, "sequence parallelism"), 0u);
}

// Bars of the per-rank chart at `W` ranks: count and the widest spread of a bin's whisker.
struct RankBars {
  size_t bars = 0;
  double widest_spread = 0;
};

RankBars rank_bars(const std::string& svg) {
  RankBars r;
  r.bars = count(svg, "<g class=\"rank\"");
  const std::regex tip(R"(busy mean [0-9.]+ s, min ([0-9.]+) s \(rank \d+\), max ([0-9.]+) s)");
  for (std::sregex_iterator it(svg.begin(), svg.end(), tip), end; it != end; ++it)
    r.widest_spread = std::max(r.widest_spread, std::stod((*it)[2]) - std::stod((*it)[1]));
  return r;
}

// At 1,000 or 1,024 ranks the per-rank chart stays page-wide: ranks are drawn in bins
// (mean, and a min-max whisker that keeps the imbalance visible), and the caption says so.
TEST(ReportChart, PerRankChartWidthIsCappedAtManyRanks) {
  const Manifest m = small_mix(3000);
  for (const int W : {1024, 1000}) {
    PlannerConfig c = small_config(W);
    c.global_batch = "steps:3";
    const Planner pl(m, c);
    const Built b = build(pl, m, {"equal_tokens", "balanced"});
    for (const Plan& p : b.plans) {
      const std::string ctx = p.strategy + " on " + std::to_string(W);
      const std::string svg = svg_by_id(b.report.html, "steps-" + p.strategy);
      ASSERT_FALSE(svg.empty()) << ctx;
      EXPECT_LE(std::stoi(svg_width(svg)), 1200) << ctx;
      const size_t steps = std::min<size_t>(24, p.num_steps());
      ASSERT_GE(steps, 2u) << ctx;
      // Bins of k ranks, a power of two, the smallest whose bars are 8 px or wider in the
      // plot's 1,120 px: 32 for 3 steps, 16 for 2.
      std::smatch bin;
      ASSERT_TRUE(std::regex_search(
          svg, bin,
          std::regex(thousands(W) + " ranks in bins of ([0-9]+) \\(bar: the bin&#39;s mean, "
                                    "line: its least to most busy rank\\)")))
          << ctx;
      const size_t k = std::stoul(bin[1]);
      EXPECT_EQ(k, steps == 3 ? 32u : 16u) << ctx;
      const RankBars r = rank_bars(svg);
      EXPECT_EQ(r.bars, steps * ((size_t(W) + k - 1) / k)) << ctx;
      EXPECT_GT(count(svg, "class=\"range\""), 0u) << ctx;
      EXPECT_NE(svg.find("ranks " + std::to_string((W - 1) / int(k) * int(k)) + "-" +
                         std::to_string(W - 1) + ":"),
                std::string::npos)
          << ctx << ": the last bin ends at the last rank";
      if (p.strategy == "equal_tokens") {
        EXPECT_GT(r.widest_spread, 1.0) << ctx << ": the whiskers show the imbalance";
      }
    }
    EXPECT_NE(b.report.html.find("a bar stands for a bin of consecutive ranks"), std::string::npos);
  }
  // 16 ranks: one bar per rank, no longer wider than the page.
  const Planner p16(m, small_config(16));
  const Built b16 = build(p16, m, {"equal_tokens"});
  const std::string svg = svg_by_id(b16.report.html, "steps-equal_tokens");
  EXPECT_EQ(svg_width(svg), "1200");
  EXPECT_EQ(count(svg, "<g class=\"rank\""), std::min<size_t>(24, b16.plans[0].num_steps()) * 16);
  EXPECT_EQ(count(svg, "class=\"range\""), 0u);
  EXPECT_EQ(count(b16.report.html, "bin of consecutive ranks"), 0u);
}

// The CLI: the page's table holds the numbers `comparison_json` prints, the embedded data
// is that JSON, --format svg writes one file per chart, and nothing is left half written.
TEST(ReportCli, TableMatchesComparisonJsonAndSvgFiles) {
  if (kCli.empty() || !fs::exists(kCli)) GTEST_SKIP() << "adaptiveload CLI not built";
  if (!fs::exists(kTaichi) || !fs::exists(kCoco)) GTEST_SKIP() << "shared datasets not found";
  const fs::path dir = fs::temp_directory_path() / ("al_report_cli_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "report.html";
  Exec r = run(kCli + " report -m " + kTaichi + " -m " + kCoco + " --on-oversize skip -o " +
               out.string() + " --format svg --json -q");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  const std::string html = read_text(out);
  EXPECT_LT(html.size(), 2u << 20);
  ASSERT_EQ(j["strategies"].size(), 4u);
  for (const auto& s : j["strategies"]) {
    const std::string name = s["name"];
    for (const char* key :
         {"imbalance", "imbalance_step_mean", "imbalance_step_maxmin", "throughput_samples_per_s",
          "throughput_tokens_per_s", "epoch_time_s", "peak_memory_utilization_mean",
          "peak_memory_utilization_max", "diversity", "micro_batches_per_rank_step", "steps",
          "padded", "dropped"})
      EXPECT_DOUBLE_EQ(cell(html, name, key), s[key].get<double>()) << name << " " << key;
  }
  const size_t a = html.find("<script type=\"application/json\" id=\"al-data\">");
  ASSERT_NE(a, std::string::npos);
  const size_t b = html.find("</script>", a);
  const size_t from = html.find('>', a) + 1;
  EXPECT_EQ(json::parse(html.substr(from, b - from)), j);
  for (const char* id : {"buckets-samples", "buckets-tokens", "cost", "steps-equal_tokens",
                         "steps-fixed", "steps-dual", "steps-balanced"}) {
    const std::string svg = read_text(dir / (std::string("report-") + id + ".svg"));
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << id;
    EXPECT_EQ(count(svg, "<svg "), 1u) << id;
  }
  EXPECT_FALSE(fs::exists(dir / "report.html.tmp"));
  // Bad arguments: neither --manifest nor --demo; an unwritable --out leaves no file.
  EXPECT_EQ(run(kCli + " report -o " + out.string() + " 2>/dev/null").code, 2);
  EXPECT_EQ(
      run(kCli + " report --demo -q -o " + (dir / "nodir" / "r.html").string() + " 2>/dev/null")
          .code,
      1);
  EXPECT_FALSE(fs::exists(dir / "nodir"));
  fs::remove_all(dir);
}

// The CLI on a sequence-parallel FSDP input: the rows compare() adds (balanced g=G) are
// explained and charted under their own ids, and the batch and g cells hold plan --json's
// numbers.
TEST(ReportCli, SequenceParallelFsdpReport) {
  if (kCli.empty() || !fs::exists(kCli)) GTEST_SKIP() << "adaptiveload CLI not built";
  const fs::path dir = fs::temp_directory_path() / ("al_report_sp_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "mix.csv") << small_mix_csv(400);
  const fs::path out = dir / "report.html";
  Exec r = run(kCli + " report -m " + (dir / "mix.csv").string() +
               " --model wan2.1-14b --grid wan-long -w 16 --sharding fsdp --json -q -o " +
               out.string() + " --format svg");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  const std::string html = read_text(out);
  EXPECT_EQ(j["inputs"]["sync"], "micro");
  EXPECT_EQ(count(html, "all-reduce"), 0u);
  EXPECT_NE(html.find("<li>sequence parallelism (Ulysses): policy <b>auto</b>"), std::string::npos);
  EXPECT_NE(html.find("balanced g=G: balanced with every sample on a fixed group of G GPUs"),
            std::string::npos);
  size_t fixed_rows = 0;
  for (const auto& s : j["strategies"]) {
    const std::string name = s["name"];
    fixed_rows += name.rfind("balanced g=", 0) == 0;
    EXPECT_DOUBLE_EQ(cell(html, name, "global_batch_samples_mean"),
                     s["global_batch_samples_mean"].get<double>())
        << name;
    EXPECT_DOUBLE_EQ(cell(html, name, "group_max"), s["group_max"].get<double>()) << name;
  }
  EXPECT_EQ(fixed_rows, 3u);
  for (const char* id :
       {"steps-balanced", "steps-balanced-g2", "steps-balanced-g4", "steps-balanced-g8"}) {
    EXPECT_EQ(count(html, std::string("id=\"") + id + "\""), 1u) << id;
    EXPECT_TRUE(fs::exists(dir / (std::string("report-") + id + ".svg"))) << id;
  }
  fs::remove_all(dir);
}

// Renders the demo report in headless Chromium when it is installed (not in CI's deps):
// the page loads from a file with networking off and paints a non-trivial screenshot.
TEST(ReportCli, RendersInChromium) {
  const char* chromium = "/usr/bin/chromium";
  if (!fs::exists(chromium))
    GTEST_SKIP() << "no /usr/bin/chromium (optional; apt-get install chromium to run this)";
  if (kCli.empty() || !fs::exists(kCli)) GTEST_SKIP() << "adaptiveload CLI not built";
  const fs::path dir =
      fs::temp_directory_path() / ("al_report_chromium_" + std::to_string(getpid()));
  fs::create_directories(dir / "profile");
  const fs::path html = dir / "report.html", png = dir / "shot.png";
  ASSERT_EQ(run(kCli + " report --demo -q -o " + html.string()).code, 0);
  const std::string cmd =
      std::string("timeout 120 ") + chromium +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync --user-data-dir=" +
      (dir / "profile").string() + " --screenshot=" + png.string() +
      " --window-size=1400,2000 file://" + html.string() + " >/dev/null 2>&1";
  run(cmd);
  ASSERT_TRUE(fs::exists(png)) << "no screenshot from: " << cmd;
  const std::string bytes = read_text(png);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  // A blank 1400x2000 page compresses to a few KB; charts and text make it far bigger.
  EXPECT_GT(bytes.size(), 50000u) << "screenshot looks blank";
  fs::remove_all(dir);
}

}  // namespace
