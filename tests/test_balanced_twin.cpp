// The planner calls every strategy the same way (strategy/context.h): a copy of balanced's
// registry line under another name, registered from outside the core (this test binary only),
// plans exactly what balanced plans on every path balanced's driver takes (step and micro
// sync, packing, unequal ranks, per-sample and fixed sequence-parallel groups, a held global
// batch), is refused where balanced is, and resumes as balanced resumes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "adaptiveload/planner/planner.h"
#include "planner_fixture.h"

namespace adaptiveload {
namespace {

constexpr const char* kTwin = "balanced_twin";

struct Case {
  const char* what;
  PlannerConfig cfg;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](const char* what, auto&& edit) {
    PlannerConfig c;
    c.world_size = 8;
    c.oversize = OversizePolicy::kSkip;
    edit(c);
    out.push_back({what, c});
  };
  add("step sync", [](PlannerConfig&) {});
  add("micro sync", [](PlannerConfig& c) { c.sharding = "fsdp", c.sync = "micro"; });
  add("packing on", [](PlannerConfig& c) { c.packing = "on"; });
  add("packing on, micro",
      [](PlannerConfig& c) { c.packing = "on", c.sharding = "fsdp", c.sync = "micro"; });
  add("unequal ranks", [](PlannerConfig& c) { c.devices = "h200:4,h100:4"; });
  add("per-sample groups", [](PlannerConfig& c) { c.sp = "per-sample"; });
  add("groups of 2", [](PlannerConfig& c) { c.sp = "2"; });
  add("samples:64", [](PlannerConfig& c) { c.global_batch = "samples:64"; });
  return out;
}

// Registers the twin for one test and removes it after.
class BalancedTwin : public ::testing::Test {
 protected:
  void SetUp() override {
    StrategyEntry twin = find_strategy("balanced");
    twin.name = kTwin;
    register_strategy(twin);
  }
  void TearDown() override { EXPECT_TRUE(unregister_strategy(kTwin)); }
};

// The twin's lines read as balanced's ("balanced_twin" -> "balanced").
std::string as_balanced(std::string s) {
  for (size_t at = s.find(kTwin); at != std::string::npos; at = s.find(kTwin, at))
    s.replace(at, std::string(kTwin).size(), "balanced");
  return s;
}

}  // namespace

TEST_F(BalancedTwin, PlansExactlyWhatBalancedPlansOnEveryPath) {
  const Manifest m = test::real_manifest();
  for (const Case& c : cases()) {
    const Planner pl(m, c.cfg);
    const Plan a = pl.plan("balanced"), b = pl.plan(kTwin);
    EXPECT_EQ(b.strategy, kTwin) << c.what;
    EXPECT_EQ(test::jsonl(b), test::jsonl(a)) << c.what;
    EXPECT_EQ(b.packed, a.packed) << c.what;
    EXPECT_EQ(b.mb_group, a.mb_group) << c.what;
    EXPECT_EQ(b.padded_samples, a.padded_samples) << c.what;
    EXPECT_EQ(pl.simulate(b).throughput_samples_per_s, pl.simulate(a).throughput_samples_per_s)
        << c.what;
    std::vector<std::string> wa = pl.warnings(a), wb = pl.warnings(b);
    for (std::string& w : wb) w = as_balanced(w);
    EXPECT_EQ(wb, wa) << c.what;
    EXPECT_EQ(as_balanced(pl.cannot_plan(find_strategy(kTwin))),
              pl.cannot_plan(find_strategy("balanced")))
        << c.what;
    if (c.cfg.packing == "on") {
      EXPECT_EQ(test::jsonl(pl.plan_bucketed(kTwin)), test::jsonl(pl.plan_bucketed("balanced")));
    }
  }
}

TEST_F(BalancedTwin, ResumesAsBalancedResumes) {
  const Manifest m = test::real_manifest();
  const Planner pl(m, cases()[0].cfg);
  PlanState sa = pl.initial_state("balanced", 8), sb = pl.initial_state(kTwin, 8);
  ASSERT_GT(pl.plan("balanced").num_steps(), 2u);
  sa.segments[0].second = sb.segments[0].second = 2;
  EXPECT_EQ(test::jsonl(pl.resume(sb, 4).plan), test::jsonl(pl.resume(sa, 4).plan));
}

// Packing where samples need groups is refused for the twin in the twin's own name.
TEST_F(BalancedTwin, RefusedWhereBalancedIsInItsOwnName) {
  const Manifest m = test::real_manifest();
  PlannerConfig c = cases()[0].cfg;
  c.packing = "on", c.sp = "2";
  const Planner pl(m, c);
  const std::string why = pl.cannot_plan(find_strategy(kTwin));
  ASSERT_FALSE(why.empty());
  EXPECT_NE(why.find(kTwin), std::string::npos) << why;
  EXPECT_EQ(as_balanced(why), pl.cannot_plan(find_strategy("balanced")));
}

}  // namespace adaptiveload
