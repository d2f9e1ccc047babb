// Issue 11, the core side: inputs a new or hostile user gives (ambiguous headers, CR-only
// files, nothing to plan, wrong JSON types, NaN/inf and extreme numbers anywhere, presets
// whose parameter counts are off) are errors that name the input, and no NaN, infinity or
// overflowed integer reaches a budget, a cost, a plan or a metric.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "adaptiveload/cost/calibration.h"
#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/plan/plan_io.h"
#include "adaptiveload/plan/state.h"
#include "adaptiveload/planner/planner.h"
#include "adaptiveload/presets/presets.h"
#include "adaptiveload/presets/resources.h"
#include "adaptiveload/util/error.h"
#include "planner_fixture.h"

using namespace adaptiveload;

namespace {

const char* const kHeader = "path,num_frames,height,width,fps\n";

// The message of the exception `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string load_error(const std::string& text, const std::string& name) {
  return error_of([&] {
    Manifest m;
    m.load_text(text, name, BadRowPolicy::kError);
  });
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

Manifest small_manifest() {
  Manifest m;
  m.load_text(
      std::string(kHeader) + "a.mp4,81,480,832,16\nb.jpg,1,480,832,\nc.mp4,33,720,1280,24\n",
      "m.csv", BadRowPolicy::kError);
  return m;
}

void expect_finite_metrics(const Metrics& m, const std::string& ctx) {
  for (const MetricField& f : metric_fields()) {
    if (f.real()) {
      EXPECT_TRUE(std::isfinite(f.number(m))) << ctx << " " << f.key;
    }
  }
}

// Every budget, cost and metric of a planner finite, every strategy's plan within contract.
void expect_all_finite(const Planner& pl, const std::string& ctx) {
  EXPECT_TRUE(std::isfinite(pl.comp_budget())) << ctx;
  EXPECT_TRUE(std::isfinite(pl.p()) && pl.p() > 0) << ctx;
  EXPECT_TRUE(std::isfinite(pl.step_budget_s()) && pl.step_budget_s() > 0) << ctx;
  EXPECT_GT(pl.mem_budget_tokens(), 0) << ctx;
  for (const Bucket& b : pl.bucketing().buckets) {
    EXPECT_TRUE(std::isfinite(pl.cost().sample_time(b)) && pl.cost().sample_time(b) > 0)
        << ctx << " " << b.name();
    EXPECT_TRUE(std::isfinite(pl.memory().bytes(1, b.tokens))) << ctx;
  }
  for (const StrategyEntry& entry : strategies()) {
    const std::string s = entry.name;
    if (entry.needs_fixed_batch() && pl.grid().fixed_batch_sizes.empty()) continue;
    if (entry.packs() && !pl.cannot_plan(entry).empty()) continue;  // samples need SP groups
    Plan p = pl.plan(s);
    test::expect_plan_contract(pl, p, ctx + " " + s);
    for (const MicroBatch& mb : p.micro_batches) EXPECT_GE(mb.count, 1u) << ctx << " " << s;
    expect_finite_metrics(pl.simulate(p), ctx + " " + s);
  }
}

}  // namespace

// --- Ambiguous headers and keys -------------------------------------------------------------

TEST(HardeningManifest, DuplicatedCsvColumnIsAnErrorNamingIt) {
  // The issue's example: the last copy used to win, planning an 81-frame clip as an image.
  std::string e =
      load_error("path,num_frames,height,width,fps,num_frames\na.mp4,81,480,832,16,1\n", "m.csv");
  EXPECT_NE(e.find("m.csv:1"), std::string::npos) << e;
  EXPECT_NE(e.find("'num_frames' twice (columns 2 and 6)"), std::string::npos) << e;
  // Every column the reader uses, including the optional fps and with padding spaces.
  for (const char* col : {"path", "height", "width", "fps"}) {
    e = load_error(
        std::string(kHeader).substr(0, std::string(kHeader).size() - 1) + ", " + col + " \n",
        "m.csv");
    EXPECT_NE(e.find(std::string("'") + col + "' twice"), std::string::npos) << col << ": " << e;
  }
  // The caption is read since issue 52: twice is ambiguous too.
  e = load_error("path,num_frames,height,width,fps,caption, caption \na.mp4,81,480,832,16,x,y\n",
                 "m.csv");
  EXPECT_NE(e.find("'caption' twice (columns 6 and 7)"), std::string::npos) << e;
  // Columns the reader ignores may repeat.
  EXPECT_EQ(load_error("path,num_frames,height,width,fps,notes,notes\na.mp4,81,480,832,16,x,y\n",
                       "m.csv"),
            "");
}

TEST(HardeningManifest, DuplicatedJsonlKeyIsABadRowNamingIt) {
  const std::string row2 =
      "{\"path\":\"a.mp4\",\"num_frames\":81,\"height\":480,\"width\":832,\"fps\":16,\"num_"
      "frames\":1}";
  std::string e = load_error(
      "{\"path\":\"b.jpg\",\"num_frames\":1,\"height\":480,\"width\":832}\n" + row2 + "\n",
      "m.jsonl");
  EXPECT_NE(e.find("m.jsonl:2"), std::string::npos) << e;
  EXPECT_NE(e.find("field 'num_frames': key 'num_frames' appears twice"), std::string::npos) << e;
  Manifest m;
  m.load_text(row2 + "\n", "m.jsonl", BadRowPolicy::kSkip);
  ASSERT_EQ(m.bad_rows().size(), 1u);
  EXPECT_EQ(m.bad_rows()[0].field, "num_frames");
  EXPECT_FALSE(m.usable(0));
}

TEST(HardeningManifest, JsonlWrongTypesAreBadRowsNamingTheField) {
  struct Case {
    const char* row;
    const char* field;
    const char* says;
  };
  const Case cases[] = {
      {R"({"path":["a.mp4"],"num_frames":81,"height":480,"width":832,"fps":16})", "path",
       "must be a string, got an array"},
      {R"({"path":7,"num_frames":81,"height":480,"width":832,"fps":16})", "path",
       "must be a string, got a number"},
      {R"({"path":"a.mp4","num_frames":{"n":81},"height":480,"width":832,"fps":16})", "num_frames",
       "got an object"},
      {R"({"path":"a.mp4","num_frames":81,"height":true,"width":832,"fps":16})", "height",
       "got a boolean"},
      {R"({"path":"a.mp4","num_frames":81,"height":480,"width":[832],"fps":16})", "width",
       "got an array"},
      {R"({"path":"a.mp4","num_frames":81,"height":480,"width":832,"fps":{"v":16}})", "fps",
       "got an object"},
      // A uint64 beyond int64 is out of range, not wrapped to a negative number.
      {R"({"path":"a.mp4","num_frames":18446744073709551615,"height":480,"width":832,"fps":16})",
       "num_frames", "out of range"},
  };
  for (const Case& c : cases) {
    std::string e = load_error(std::string(c.row) + "\n", "m.jsonl");
    EXPECT_NE(e.find(std::string("m.jsonl:1: field '") + c.field + "'"), std::string::npos)
        << c.row << ": " << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.row << ": " << e;
    Manifest m;
    m.load_text(std::string(c.row) + "\n", "m.jsonl", BadRowPolicy::kSkip);
    ASSERT_EQ(m.bad_rows().size(), 1u) << c.row;
    EXPECT_EQ(m.bad_rows()[0].field, c.field) << c.row;
    EXPECT_EQ(m.total_rows(), 1);
    EXPECT_FALSE(m.usable(0));
  }
}

// --- Line endings and nothing to plan --------------------------------------------------------

TEST(HardeningManifest, CrOnlyLfAndCrlfFilesReadTheSame) {
  const std::string lf =
      std::string(kHeader) + "a.mp4,81,480,832,16\n\"b\rc.jpg\",1,480,832,\nd.mp4,33,720,1280,24\n";
  std::string cr = lf, crlf;
  for (char& c : cr)
    if (c == '\n') c = '\r';
  for (char c : lf) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  for (const auto& [text, what] : {std::pair{lf, "LF"}, {cr, "CR"}, {crlf, "CRLF"}}) {
    Manifest m;
    m.load_text(text, "m.csv", BadRowPolicy::kError);
    ASSERT_EQ(m.total_rows(), 3) << what;
    EXPECT_EQ(m.path(0), "a.mp4") << what;
    EXPECT_EQ(m.clip(0).num_frames, 81) << what;
    EXPECT_EQ(m.clip(2).width, 1280) << what;
    EXPECT_DOUBLE_EQ(m.clip(2).fps, 24) << what;
    EXPECT_EQ(m.where(2), "m.csv:5") << what;  // the quoted CR counts as a line
  }
  // JSONL too (a JSON string cannot hold a raw CR, so a lone CR is a line end).
  const std::string jl =
      "{\"path\":\"a.mp4\",\"num_frames\":81,\"height\":480,\"width\":832,\"fps\":16}\r"
      "{\"path\":\"b.jpg\",\"num_frames\":1,\"height\":480,\"width\":832}\r";
  Manifest j;
  j.load_text(jl, "m.jsonl", BadRowPolicy::kError);
  ASSERT_EQ(j.total_rows(), 2);
  EXPECT_EQ(j.where(1), "m.jsonl:2");
}

TEST(HardeningPlanner, NothingToPlanIsAnErrorSayingWhereTheRowsWent) {
  PlannerConfig cfg;
  auto plan_error = [&](const std::string& text, BadRowPolicy policy) {
    return error_of([&] {
      Manifest m;
      m.load_text(text, "m.csv", policy);
      Planner pl(m, cfg);
    });
  };
  // Empty file: the reader refuses it.
  EXPECT_NE(plan_error("", BadRowPolicy::kError).find("empty manifest"), std::string::npos);
  // Header only (also what a CR-only file read as LF-only looked like).
  std::string e = plan_error(kHeader, BadRowPolicy::kError);
  EXPECT_NE(e.find("m.csv: nothing to plan: 0 row(s)"), std::string::npos) << e;
  EXPECT_NE(e.find("no data rows"), std::string::npos) << e;
  // Only bad rows (skipped), only unfit rows, only oversize rows (skipped): still nothing.
  e = plan_error(std::string(kHeader) + "a.mp4,x,480,832,16\n", BadRowPolicy::kSkip);
  EXPECT_NE(e.find("nothing to plan: 1 row(s), 1 bad, 0 fit no bucket"), std::string::npos) << e;
  e = plan_error(std::string(kHeader) + "tiny.jpg,1,8,8,\n", BadRowPolicy::kError);
  EXPECT_NE(e.find("nothing to plan: 1 row(s), 0 bad, 1 fit no bucket of grid 'wan'"),
            std::string::npos)
      << e;
  cfg.oversize = OversizePolicy::kSkip;
  cfg.mem_budget_tokens = 100;
  e = plan_error(std::string(kHeader) + "a.mp4,81,480,832,16\n", BadRowPolicy::kError);
  EXPECT_NE(e.find("1 oversize"), std::string::npos) << e;
  // The synthetic-bucketing constructor too.
  Bucketing empty;
  EXPECT_NE(error_of([&] { Planner pl(empty, PlannerConfig{}); }).find("nothing to plan"),
            std::string::npos);
}

// --- NaN, infinity and ranges ---------------------------------------------------------------

TEST(HardeningPlanner, NumericOptionsAreRangeCheckedNamingTheOption) {
  const Manifest m = small_manifest();
  const double nan = std::numeric_limits<double>::quiet_NaN(),
               inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* name;
    void (*set)(PlannerConfig&, double);
    double value;
  };
  auto p = [](PlannerConfig& c, double v) { c.p = v; };
  auto comp = [](PlannerConfig& c, double v) { c.comp_budget = v; };
  auto step = [](PlannerConfig& c, double v) { c.step_budget_s = v; };
  auto mem = [](PlannerConfig& c, double v) { c.mem_budget_tokens = int64_t(v); };
  auto ws = [](PlannerConfig& c, double v) { c.world_size = int(v); };
  auto epoch = [](PlannerConfig& c, double v) { c.epoch = int64_t(v); };
  const Case cases[] = {
      {"p (exponent", p, 100},  // the issue's `plan --p 100`: M_comp became -nan
      {"p (exponent", p, -1},         {"p (exponent", p, nan},
      {"p (exponent", p, inf},        {"comp_budget", comp, nan},
      {"comp_budget", comp, inf},     {"comp_budget", comp, -5},
      {"step_budget_s", step, nan},   {"step_budget_s", step, inf},
      {"step_budget_s", step, 1e300}, {"step_budget_s", step, -1},
      {"mem_budget_tokens", mem, -1}, {"mem_budget_tokens", mem, 1e18},
      {"world size", ws, 0},          {"world size", ws, 1 << 21},
      {"epoch", epoch, -1},
  };
  for (const Case& c : cases) {
    PlannerConfig cfg;
    c.set(cfg, c.value);
    std::string e = error_of([&] { Planner pl(m, cfg); });
    EXPECT_NE(e.find(c.name), std::string::npos) << c.name << " = " << c.value << ": " << e;
    EXPECT_NE(e.find("must be"), std::string::npos) << e;
    EXPECT_THROW(Planner(m, cfg), ConfigError);
  }
  // The world size of a plan or a resume, too (the Python sampler passes them through).
  Planner ok(m, PlannerConfig{});
  for (int w : {-1, kMaxWorldSize + 1}) {
    EXPECT_NE(error_of([&] { ok.plan("dual", w); }).find("world size is " + std::to_string(w)),
              std::string::npos);
    EXPECT_NE(
        error_of([&] { ok.resume(ok.initial_state("dual"), w); }).find("it must be in 1..1048576"),
        std::string::npos);
  }
  // At the edges of the ranges everything stays finite.
  PlannerConfig cfg;
  cfg.p = kMaxP;
  expect_all_finite(Planner(m, cfg), "p = 4");
  cfg = PlannerConfig{};
  cfg.p = 1e-6;
  expect_all_finite(Planner(m, cfg), "p = 1e-6");
  cfg = PlannerConfig{};
  cfg.comp_budget = 1e300;  // never binds: B is memory's, and no int64 overflow on the way
  Planner big(m, cfg);
  expect_all_finite(big, "M_comp = 1e300");
  cfg.comp_budget = 0;
  Planner aut(m, cfg);
  EXPECT_EQ(big.plan("dual").micro_batches.size(), aut.plan("equal_tokens").micro_batches.size());
  cfg = PlannerConfig{};
  cfg.step_budget_s = 1e9;
  expect_all_finite(Planner(m, cfg), "step budget 1e9 s");
}

TEST(HardeningPresets, PresetFieldsAreRangeCheckedNamingTheField) {
  nlohmann::json model = nlohmann::json::parse(*find_resource("presets/models/wan2.1-1.3b.json"));
  struct Case {
    const char* key;
    nlohmann::json value;
  };
  for (const Case& c : {Case{"dim", 1e300}, Case{"dim", -3}, Case{"dim", 1.5}, Case{"layers", 1e19},
                        Case{"ffn_dim", "wide"}, Case{"text_len", -1}, Case{"heads", 0},
                        Case{"vae_stride", nlohmann::json::array({4, 1e300, 8})},
                        Case{"params", 1e300}, Case{"latent_channels", 1e10}}) {
    nlohmann::json j = model;
    j[c.key] = c.value;
    const std::string path = write_temp(std::string("model_") + c.key + ".json", j.dump());
    std::string e = error_of([&] { load_model(path); });
    EXPECT_NE(e.find(std::string("field '") + c.key + "'"), std::string::npos)
        << c.key << "=" << c.value << ": " << e;
  }
  nlohmann::json device = nlohmann::json::parse(*find_resource("presets/devices/h200.json"));
  for (const Case& c :
       {Case{"memory_gb", 1e300}, Case{"memory_gb", 0}, Case{"peak_tflops", 1e300},
        Case{"allreduce_bus_gbps", -1}, Case{"efficiency", 2},
        Case{"microbatch_overhead_ms", 1e300}, Case{"half_efficiency_tokens", 1e300},
        Case{"memory_reserve_fraction", 1}}) {
    nlohmann::json j = device;
    j[c.key] = c.value;
    const std::string path = write_temp(std::string("device_") + c.key + ".json", j.dump());
    std::string e = error_of([&] { load_device(path); });
    EXPECT_NE(e.find(std::string("field '") + c.key + "'"), std::string::npos)
        << c.key << ": " << e;
  }
  nlohmann::json grid = nlohmann::json::parse(*find_resource("presets/grids/wan.json"));
  for (const Case& c :
       {Case{"fps", 1e300}, Case{"fps", 1e-300}, Case{"frames", nlohmann::json::array({1, 1e300})},
        Case{"frames", nlohmann::json::array({0, 5})}}) {
    nlohmann::json j = grid;
    j[c.key] = c.value;
    const std::string path = write_temp(std::string("grid_") + c.key + ".json", j.dump());
    std::string e = error_of([&] { load_grid(path); });
    EXPECT_NE(e.find(std::string("field '") + c.key + "'"), std::string::npos)
        << c.key << ": " << e;
  }
  nlohmann::json g = grid;
  g["tiers"][0]["sizes"]["16:9"] = nlohmann::json::array({256, 1000000});
  EXPECT_NE(error_of([&] {
              load_grid(write_temp("grid_size.json", g.dump()));
            }).find("size '16:9' width"),
            std::string::npos);
  g = grid;
  g["fixed_batch_sizes"]["256p"]["1"] = 1e300;
  EXPECT_NE(error_of([&] {
              load_grid(write_temp("grid_fixed.json", g.dump()));
            }).find("fixed batch size for 256p/1"),
            std::string::npos);
}

TEST(HardeningPresets, ProfileAndSegmentCostEntriesAreRangeChecked) {
  const Manifest m = small_manifest();
  auto profile = [](const std::string& cost) {
    return "{\"format\":\"adaptiveload-profile\",\"version\":1,\"cost\":" + cost + "}";
  };
  for (const auto& [cost, field] :
       {std::pair{std::string(R"({"a":1e300,"b":0,"c0":0})"), "'a'"},
        {R"({"a":0,"b":1e300,"c0":0})", "'b'"},
        {R"({"a":1e-7,"b":0,"c0":1e300})", "'c0'"},
        {R"({"a":1e-7,"b":0,"c0":0,"overhead_s":1e300})", "'overhead_s'"},
        {R"({"a":1e-7,"b":0,"c0":0,"half_efficiency_tokens":1e300})",
         "'half_efficiency_tokens'"}}) {
    PlannerConfig cfg;
    cfg.cost_model = "profile";
    cfg.profile = write_temp("profile.json", profile(cost));
    std::string e = error_of([&] { Planner pl(m, cfg); });
    EXPECT_NE(e.find(std::string("profile field ") + field), std::string::npos)
        << cost << ": " << e;
    nlohmann::json full = {
        {"a", 1e-7}, {"b", 0}, {"c0", 0}, {"overhead_s", 0}, {"half_efficiency_tokens", 0}};
    full.update(nlohmann::json::parse(cost));
    EXPECT_NE(error_of([&] { canonical_cost_json(full.dump()); }).find(field), std::string::npos)
        << cost;
  }
  // Zero bytes per sample in a profile's memory model: batches are capped, not int64-overflowed.
  PlannerConfig cfg;
  cfg.cost_model = "profile";
  cfg.profile = write_temp("profile_mem.json", R"({"format":"adaptiveload-profile","version":1,
    "cost":{"a":1e-7,"b":1e-12,"c0":0.001},"memory":{"static_bytes":1e9,"m0":0,"m1":0}})");
  Planner pl(m, cfg);
  EXPECT_LE((MemoryModel{1e9, 0, 0}.max_batch(1000, 1e12)), kMaxMicroBatch);
  expect_all_finite(pl, "profile with zero bytes per sample");
  // A table with a repeated token count would divide by zero when interpolating.
  cfg.profile = write_temp(
      "profile_table.json",
      R"({"format":"adaptiveload-profile","version":1,"table":[[1000,0.1],[1000,0.2],[5000,1]]})");
  EXPECT_NE(error_of([&] { Planner p2(m, cfg); }).find("two rows for 1000 tokens"),
            std::string::npos);
}

// A profile's version is compared as read: a float beyond int's range (fuzz_profile's
// "version": 1.5e74, undefined behaviour through get<int>), 2^32 + 1 (which get<int> wraps to 1)
// and 1.5 (which it truncates to 1) are another version; 1 and 1.0 read; a string stays the
// JSON library's type error.
TEST(HardeningPresets, ProfileVersionIsComparedAsRead) {
  const Manifest m = small_manifest();
  auto error_with = [&](const std::string& version) {
    PlannerConfig cfg;
    cfg.cost_model = "profile";
    cfg.profile = write_temp("profile_version.json",
                             R"({"format":"adaptiveload-profile","version":)" + version +
                                 R"(,"cost":{"a":1e-7,"b":1e-12,"c0":0.001}})");
    return error_of([&] { Planner pl(m, cfg); });
  };
  for (const char* bad :
       {"1.5e74", "-1.5e74", "4294967297", "18446744073709551615", "1.5", "2", "0", "-1"})
    EXPECT_NE(error_with(bad).find("unsupported profile version"), std::string::npos) << bad;
  EXPECT_NE(error_with("\"1\"").find("malformed profile"), std::string::npos);
  EXPECT_EQ(error_with("1"), "");
  EXPECT_EQ(error_with("1.0"), "");
}

// --- Float-to-integer overflow (the class -fsanitize=float-cast-overflow catches) ------------

TEST(HardeningGeometry, ExtremeValuesNeverOverflowAnInteger) {
  // The issue's example: fps = 1e-300 gave "-9223372036854775807" frames.
  EXPECT_EQ(resampled_frames(81, 1e-300, 16), INT64_MAX);
  EXPECT_EQ(resampled_frames(81, 1e300, 16), 1);
  EXPECT_EQ(resampled_frames(10'000'000, 1e-3, 1000), 9'999'999'000'001);
  EXPECT_EQ(resampled_frames(81, 16, 1e300), INT64_MAX);
  EXPECT_EQ(resampled_frames(81, 16, 0), 81);
  EXPECT_GT(resampled_frames(INT64_MAX, 1e-3, 1000), 0);
  // Through the manifest reader: an implausible fps is a bad row naming it.
  std::string e = load_error(std::string(kHeader) + "a.mp4,81,480,832,1e-300\n", "m.csv");
  EXPECT_NE(e.find("m.csv:2: field 'fps': 1e-300 is implausibly small"), std::string::npos) << e;
  EXPECT_NE(load_error(std::string(kHeader) + "a.mp4,81,480,832,1e300\n", "m.csv")
                .find("implausibly large"),
            std::string::npos);
  EXPECT_NE(
      load_error(std::string(kHeader) + "a.mp4,1e300,480,832,16\n", "m.csv").find("out of range"),
      std::string::npos);
  EXPECT_NE(
      load_error(std::string(kHeader) + "a.mp4,81,1e300,832,16\n", "m.csv").find("field 'height'"),
      std::string::npos);
  // The largest values the reader accepts go through geometry, cost, budgets and every
  // strategy: 10M frames at the slowest and fastest fps, the largest side, the smallest clip.
  Manifest m;
  m.load_text(
      std::string(kHeader) + "long.mp4,10000000,720,1280,0.001\nfast.mp4,10000000,720,1280,1000\n" +
          "huge.jpg,1,65536,65536,\nwide.mp4,81,65536,65536,16\nshort.mp4,2,480,832,1000\n" +
          "ok.mp4,81,480,832,16\n",
      "m.csv", BadRowPolicy::kError);
  for (const char* model :
       {"wan2.1-1.3b", "wan2.1-14b", "hunyuanvideo", "cogvideox-5b", "opensora-1.2"}) {
    for (int w : {1, 8, 1024}) {
      if (w == 1 && std::string(model) != "wan2.1-1.3b" && std::string(model) != "opensora-1.2")
        continue;
      PlannerConfig cfg;
      cfg.model = model;
      cfg.world_size = w;
      cfg.oversize = OversizePolicy::kSkip;
      cfg.sharding = "fsdp";
      Planner pl(m, cfg);
      EXPECT_EQ(pl.bucketing().unfit.size(), 1u) << model;  // short.mp4: 2 frames give 1 at 16 fps
      expect_all_finite(pl, std::string(model) + " w=" + std::to_string(w));
    }
  }
  // 14B on the slow cpu preset: thousands of seconds per sample stay finite and in range.
  PlannerConfig cfg;
  cfg.model = "wan2.1-14b";
  cfg.device = "cpu";
  cfg.sharding = "fsdp";
  cfg.world_size = 64;
  cfg.oversize = OversizePolicy::kSkip;
  expect_all_finite(Planner(m, cfg), "14B on cpu");
}

// --- Parameter counts against the authors' figures -----------------------------------------

TEST(HardeningPresets, EveryModelPresetCountsItsPublishedParameters) {
  // Published sizes (the authors' model cards / papers). Tolerance 20%: the published figures
  // are rounded names (CogVideoX-2B's transformer checkpoint holds about 1.7B, -15% from its
  // name; CogVideoX-5B's about 5.6B, +11%), and our count covers the transformer blocks only
  // (embeddings, text projection and the final layer are under 2%). A count that misses a
  // whole set of weights (HunyuanVideo's dual-stream text weights: 6.8B for 13B, -48%)
  // fails it by far.
  //   Wan 2.1 1.3B, 14B:  Wan-Video/Wan2.1 README ("1.3B", "14B" T2V models)
  //   HunyuanVideo 13B:   Tencent/HunyuanVideo README and paper, arXiv 2412.03603 ("13B")
  //   CogVideoX 2B, 5B:   THUDM/CogVideo README, arXiv 2408.06072 (CogVideoX-2B, -5B)
  //   Open-Sora 1.2 1.1B: hpcaitech/Open-Sora docs/report_03.md ("1.1B" STDiT3-XL/2)
  const std::pair<const char*, double> published[] = {
      {"wan2.1-1.3b", 1.3e9}, {"wan2.1-14b", 14e9},  {"hunyuanvideo", 13e9},
      {"cogvideox-2b", 2e9},  {"cogvideox-5b", 5e9}, {"opensora-1.2", 1.1e9},
  };
  std::vector<std::string> checked;
  for (const auto& [name, params] : published) {
    const ModelPreset m = load_model(name);
    EXPECT_NEAR(m.params / params, 1.0, 0.20)
        << name << ": counts " << m.params / 1e9 << "B, published " << params / 1e9 << "B";
    checked.push_back(name);
  }
  // Every built-in preset but the project's own test model has a published figure above.
  for (const auto& name : preset_names("models")) {
    if (name == "tiny-dit") continue;
    EXPECT_NE(std::find(checked.begin(), checked.end(), name), checked.end())
        << name << " has no published figure";
  }
  // HunyuanVideo: 20 dual-stream + 40 single-stream blocks, well within 5% of 13B.
  const ModelPreset h = load_model("hunyuanvideo");
  EXPECT_EQ(h.layers, 60);
  EXPECT_NEAR(h.params / 13e9, 1.0, 0.05) << h.params;
  // More weights are more model state: 13B in DDP on one H200 does not fit (18 B/param).
  Manifest m = small_manifest();
  PlannerConfig cfg;
  cfg.model = "hunyuanvideo";
  cfg.world_size = 1;
  std::string e = error_of([&] { Planner pl(m, cfg); });
  EXPECT_NE(e.find("model state of hunyuanvideo"), std::string::npos) << e;
}

// --- Grids follow the model -------------------------------------------------------------------

TEST(HardeningPresets, ModelPresetNamesItsDefaultGrid) {
  const Manifest m = small_manifest();
  for (const auto& [model, grid] : {std::pair{"cogvideox-5b", "cogvideox"},
                                    {"cogvideox-2b", "cogvideox"},
                                    {"wan2.1-1.3b", "wan"},
                                    {"tiny-dit", "tiny"}}) {
    PlannerConfig cfg;
    cfg.model = model;
    cfg.device = "h200";
    cfg.sharding = "fsdp";
    Planner pl(m, cfg);
    EXPECT_EQ(pl.grid().name, grid) << model;
    EXPECT_EQ(pl.config().grid, grid) << model;
  }
  for (const auto& name : preset_names("models")) {
    const std::string g = load_model(name).default_grid;
    EXPECT_NO_THROW(load_grid(g)) << name << " names grid " << g;
  }
  // An explicit grid still wins.
  PlannerConfig cfg;
  cfg.model = "cogvideox-5b";
  cfg.grid = "wan";
  EXPECT_EQ(Planner(m, cfg).grid().name, "wan");
}

TEST(HardeningPresets, CogVideoXGridFitsTheDemoSet) {
  // CogVideoX trains 49-frame 8 fps clips (and shorter ones, mixed-duration) and images at
  // 480x720, after a 256-pixel stage. The old grid (49 frames only, 480x720 and up) left
  // 6,612 of the 8,334 demo rows unfit: every clip under 6 s and every image under 720 px.
  Manifest m = test::real_manifest();
  const BucketGrid g = load_grid("cogvideox");
  Bucketing bk = assign_buckets(m, g, load_model("cogvideox-5b"));
  EXPECT_LT(double(bk.unfit.size()), 0.02 * double(m.total_rows())) << bk.unfit.size() << " unfit";
  bool has_480x720 = false;
  for (const Tier& t : g.tiers)
    for (const TierSize& s : t.sizes) has_480x720 = has_480x720 || (s.h == 480 && s.w == 720);
  EXPECT_TRUE(has_480x720);
  EXPECT_EQ(g.frames.back(), 49);
  EXPECT_DOUBLE_EQ(g.fps, 8);
  for (int f : g.frames) EXPECT_EQ((f - 1) % 4, 0) << f;  // 4k+1: the VAE's temporal stride
}

// --- Padding repeats are marked ----------------------------------------------------------------

TEST(HardeningPlan, JsonlMarksWhichMicroBatchesArePaddingRepeats) {
  // 3 clips over 8 ranks: the final (only) step is padded with repeats for 5+ ranks.
  Manifest m = small_manifest();
  PlannerConfig cfg;
  cfg.world_size = 8;
  Planner pl(m, cfg);
  for (const StrategyEntry& entry : strategies()) {
    const std::string s = entry.name;
    if (entry.needs_fixed_batch()) continue;
    Plan p = pl.plan(s);
    ASSERT_GT(p.padded_samples, 0) << s;
    std::istringstream lines(test::jsonl(p));
    std::string line;
    int64_t marked_samples = 0;
    for (size_t t = 0; std::getline(lines, line); ++t) {
      auto j = nlohmann::json::parse(line);
      ASSERT_TRUE(j.contains("padded_mbs")) << line;
      std::vector<std::pair<int, uint64_t>> want;
      for (int r = 0; r < p.world_size; ++r) {
        auto [b, e] = p.rank_range(t, r);
        for (uint64_t mb = b; mb < e; ++mb)
          if (p.micro_batches[mb].padded) want.emplace_back(r, mb - b);
      }
      std::vector<std::pair<int, uint64_t>> got;
      int64_t step_marked = 0;
      for (const auto& x : j["padded_mbs"]) {
        got.emplace_back(x[0].get<int>(), x[1].get<uint64_t>());
        step_marked += int64_t(j["ranks"][x[0].get<size_t>()][x[1].get<size_t>()].size());
      }
      EXPECT_EQ(got, want) << s << " step " << t;
      EXPECT_EQ(step_marked, j["padded"].get<int64_t>()) << s << " step " << t;
      marked_samples += step_marked;
    }
    EXPECT_EQ(marked_samples, p.padded_samples) << s;
  }
  // No padding: an empty list, the same schema.
  cfg.world_size = 1;
  Plan p = Planner(m, cfg).plan("dual");
  EXPECT_NE(test::jsonl(p).find("\"padded_mbs\":[]"), std::string::npos);
}

// --- End policy drop ---------------------------------------------------------------------------

TEST(HardeningPlan, DroppedSamplesAreNotCountedAsTrained) {
  Manifest m = test::real_manifest();
  PlannerConfig cfg;
  cfg.world_size = 1024;
  cfg.end_policy = EndPolicy::kDrop;
  Planner pl(m, cfg);
  const int64_t planned = int64_t(test::usable_ids(pl).size());
  for (const char* s : {"equal_tokens", "dual", "balanced"}) {
    Plan p = pl.plan(s);
    Metrics x = pl.simulate(p);
    EXPECT_EQ(x.samples + x.dropped, planned) << s;
    EXPECT_EQ(x.samples, int64_t(test::trained_ids(p).size())) << s;
    if (x.epoch_time_s > 0) {
      EXPECT_DOUBLE_EQ(x.throughput_samples_per_s, double(x.samples) / x.epoch_time_s) << s;
    }
    expect_finite_metrics(x, s);
  }
}

// --- Advice follows the configuration ----------------------------------------------------------

TEST(HardeningPlanner, AdviceFollowsTheConfiguration) {
  Manifest m;
  m.load_text(std::string(kHeader) + "small.jpg,1,480,832,\nbig.mp4,300,720,1280,30\n", "m.csv",
              BadRowPolicy::kError);
  PlannerConfig cfg;
  cfg.device = "a100";
  cfg.checkpointing = false;
  cfg.sp = "off";  // one GPU per sample; the advice then names sequence parallelism too
  std::string e = error_of([&] { Planner pl(m, cfg); });
  EXPECT_NE(e.find("enable activation checkpointing"), std::string::npos) << e;
  EXPECT_NE(e.find("--sp auto"), std::string::npos) << e;
  // Checkpointing already on: not suggested again.
  // Checkpointing already on (40 GB: the 1.3B state fits, one 720p 81-frame clip does not).
  cfg.checkpointing = true;
  cfg.device = write_temp("gpu40.json", R"({"name":"gpu40","memory_gb":40,"peak_tflops":100,
    "allreduce_bus_gbps":100})");
  cfg.sharding = "none";
  e = error_of([&] { Planner pl(m, cfg); });
  ASSERT_NE(e.find("big.mp4"), std::string::npos) << e;
  EXPECT_EQ(e.find("checkpointing"), std::string::npos) << e;
  EXPECT_NE(e.find("--sharding fsdp"), std::string::npos) << e;
  // Already sharded (20 GB: the sharded state fits, the clip does not): fsdp is not suggested.
  cfg.device = write_temp("gpu20.json", R"({"name":"gpu20","memory_gb":20,"peak_tflops":100,
    "allreduce_bus_gbps":100})");
  cfg.sharding = "fsdp";
  e = error_of([&] { Planner pl(m, cfg); });
  ASSERT_NE(e.find("big.mp4"), std::string::npos) << e;
  EXPECT_EQ(e.find("--sharding fsdp"), std::string::npos) << e;
  // Over the token budget: the advice is about the budget, not memory.
  cfg = PlannerConfig{};
  cfg.sp = "off";
  cfg.mem_budget_tokens = 50000;
  e = error_of([&] { Planner pl(m, cfg); });
  EXPECT_NE(e.find("raise --mem-budget"), std::string::npos) << e;
  EXPECT_EQ(e.find("checkpointing"), std::string::npos) << e;

  // Model state: at W=1 fsdp alone cannot help; sharded, only more GPUs can.
  cfg = PlannerConfig{};
  cfg.model = "wan2.1-14b";
  cfg.world_size = 1;
  cfg.sharding = "none";
  e = error_of([&] { Planner pl(small_manifest(), cfg); });
  EXPECT_NE(e.find("--sharding fsdp with more GPUs"), std::string::npos) << e;
  cfg.sharding = "fsdp";
  e = error_of([&] { Planner pl(small_manifest(), cfg); });
  EXPECT_EQ(e.find("--sharding fsdp"), std::string::npos) << e;
  EXPECT_NE(e.find("use more GPUs"), std::string::npos) << e;
  cfg.world_size = 8;
  cfg.sharding = "none";
  e = error_of([&] { Planner pl(small_manifest(), cfg); });
  EXPECT_NE(e.find("use --sharding fsdp (shards it over the 8 GPUs)"), std::string::npos) << e;
}

TEST(HardeningCalibration, FitsAreFiniteOrRefused) {
  // Extreme but positive measurements: the fitted cost model is finite, or the fit is refused
  // by name; never a NaN written into a profile.
  for (double t : {1e-300, 1e-9, 1e300}) {
    std::vector<Measurement> pts;
    for (int64_t S : {1000, 4000, 16000, 64000}) pts.push_back({S, 1, t * double(S), -1});
    try {
      CalibrationFit f = fit_calibration(pts);
      for (double v : {f.a, f.b, f.c0, f.overhead_s, f.power_p, f.power_k, f.median_rel_error})
        EXPECT_TRUE(std::isfinite(v)) << t;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("calibration fit"), std::string::npos) << e.what();
    }
  }
}
