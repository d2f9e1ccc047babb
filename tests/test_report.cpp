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

#include "test_support.h"
#include "adaptiveload/planner/planner.h"
#include "adaptiveload/report/html_report.h"
#include "adaptiveload/report/svg_chart.h"
#include "adaptiveload/util/error.h"

namespace fs = std::filesystem;
using namespace adaptiveload;
using json = nlohmann::json;

namespace {

const std::string kDatasets = AL_DATA_DIR;
const std::string kCli = AL_CLI_PATH;
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
  const auto pts = profile_points(prof.string());
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_DOUBLE_EQ(pts[0].second, 0.05);
  ReportOptions o;
  o.profile_path = prof.string();
  const Report r = build_report(*planner_, manifest_, plans_, metrics_, o);
  EXPECT_EQ(count(svg_by_id(r.html, "cost"), "class=\"calibrated\""), 3u);
  {
    std::ofstream f(prof);
    f << R"({"points": [{"tokens": 1560, "batch": 0, "time_s": 0.4}]})";
  }
  try {
    profile_points(prof.string());
    ADD_FAILURE() << "a zero batch must be rejected";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("points[0]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("batch"), std::string::npos) << e.what();
  }
  fs::remove(prof);
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
