// One profile value (cost/profile.h): the file parsed once, and the cost model, the planner,
// resume and the report all reading that value; cost models in a registry (name -> factory).
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/planner/option_ranges.h"
#include "adaptiveload/planner/planner.h"
#include "adaptiveload/report/html_report.h"
#include "adaptiveload/util/error.h"
#include "planner_fixture.h"

namespace adaptiveload {
namespace {

// A profile with every optional part: memory, the optimizer step, a measured link, points.
// `half_tokens`: the small-batch ramp's N_half (large: images cost far more in small batches,
// so a refit that lost it would plan otherwise).
std::string full_profile(const std::string& name, const char* half_tokens = "256") {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << R"({"format":"adaptiveload-profile","version":1,
    "cost":{"a":2e-6,"b":4e-10,"c0":1e-3,"overhead_s":0.01,"half_efficiency_tokens":)"
                      << half_tokens << R"(},
    "memory":{"static_bytes":3e10,"m0":1e6,"m1":2e5},
    "step":{"optimizer_s":0.05},
    "link":{"allreduce_bus_bytes_per_s":3e9,"allreduce_latency_s":2e-5},
    "points":[{"tokens":1560,"batch":4,"time_s":0.2},{"tokens":32760,"batch":1,"time_s":0.9}]})";
  return path;
}

PlannerConfig profile_config(const std::string& path, const char* model = "profile") {
  PlannerConfig cfg;
  cfg.cost_model = model;
  cfg.profile = path;
  cfg.world_size = 4;
  cfg.oversize = OversizePolicy::kSkip;
  return cfg;
}

// The analytic model at twice the seconds: a model registered from outside the core.
class SlowAnalytic : public CostModel {
 public:
  explicit SlowAnalytic(const CostContext& ctx) : base_(ctx) {
    overhead_s = base_.overhead_s, half_efficiency_tokens = base_.half_efficiency_tokens;
  }
  std::string name() const override { return "slow_analytic"; }
  double sample_time(const Bucket& b) const override { return 2 * base_.sample_time(b); }

 private:
  AnalyticCost base_;
};
std::unique_ptr<CostModel> make_slow(const CostContext& ctx, const std::vector<Bucket>&,
                                     const std::vector<int64_t>&) {
  return std::make_unique<SlowAnalytic>(ctx);
}

}  // namespace

TEST(CostRegistry, BuiltinsInOrderAndOneListForTheOption) {
  EXPECT_EQ(cost_model_names(), (std::vector<std::string>{"analytic", "power", "profile"}));
  EXPECT_TRUE(find_cost_model("profile").uses_profile);
  EXPECT_FALSE(find_cost_model("analytic").uses_profile);
  EXPECT_EQ(option_range("cost_model").choices, cost_model_names());
  try {
    find_cost_model("nope");
    ADD_FAILURE() << "an unknown model must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("analytic, power, profile"), std::string::npos)
        << e.what();
  }
  // The profile model without a profile says how to give one.
  EXPECT_THROW(make_cost_model("profile", CostContext{}, {}, {}), ConfigError);
}

TEST(CostRegistry, ARegisteredModelPlansWithoutTouchingThePlanner) {
  register_cost_model({"slow_analytic", "analytic at twice the seconds (test)", make_slow});
  EXPECT_THROW(register_cost_model({"slow_analytic", "again", make_slow}), ConfigError);
  const Manifest m = test::real_manifest();
  PlannerConfig cfg;
  cfg.world_size = 4;
  const Planner analytic(m, cfg);
  cfg.cost_model = "slow_analytic";
  const Planner slow(m, cfg);
  EXPECT_EQ(slow.cost().name(), "slow_analytic");
  for (const Bucket& b : slow.bucketing().buckets)
    EXPECT_DOUBLE_EQ(slow.cost().sample_time(b), 2 * analytic.cost().sample_time(b)) << b.name();
  const Plan p = slow.plan("balanced");
  test::expect_plan_contract(slow, p, "slow_analytic balanced");
  EXPECT_TRUE(unregister_cost_model("slow_analytic"));
  EXPECT_FALSE(unregister_cost_model("slow_analytic"));
  EXPECT_FALSE(unregister_cost_model("analytic"));  // built-ins stay
  EXPECT_THROW(find_cost_model("slow_analytic"), ConfigError);
}

// The planner reads the file once; its cost model prices with that value (not a copy read
// again), and its memory, link and optimizer step are the value's.
TEST(ProfileValue, PlannerAndCostModelShareTheOneValue) {
  const Manifest m = test::real_manifest();
  const std::string path = full_profile("value_full.json");
  const Planner pl(m, profile_config(path));
  const Profile* prof = pl.profile();
  ASSERT_NE(prof, nullptr);
  EXPECT_EQ(prof->path, path);
  const auto* cost = dynamic_cast<const ProfileCost*>(&pl.cost());
  ASSERT_NE(cost, nullptr);
  EXPECT_EQ(&cost->profile(), prof);
  EXPECT_EQ(pl.memory().static_bytes, 3e10);
  EXPECT_EQ(pl.memory().m1, 2e5);
  EXPECT_EQ(pl.device().allreduce_bus_bytes_per_s, 3e9);
  EXPECT_EQ(pl.step_fixed_s(), 0.05);
  EXPECT_EQ(prof->points.size(), 2u);
  EXPECT_DOUBLE_EQ(prof->points[0].second, 0.05);
  // The report plots the planner's value: its points, with no path of its own.
  const Plan p = pl.plan("equal_tokens");
  const Report r = build_report(pl, &m, {p}, {pl.simulate(p)}, ReportOptions{});
  size_t points = 0;
  for (size_t at = r.html.find("class=\"calibrated\""); at != std::string::npos;
       at = r.html.find("class=\"calibrated\"", at + 1))
    ++points;
  EXPECT_EQ(points, 2u);
}

// A profile given beside another cost model is read (the report plots its points) but does
// not price: memory, link and step stay the presets'.
TEST(ProfileValue, BesideAnotherModelItIsReadButDoesNotPrice) {
  const Manifest m = test::real_manifest();
  const std::string path = full_profile("value_power.json");
  PlannerConfig cfg = profile_config(path, "power");
  const Planner power(m, cfg);
  ASSERT_NE(power.profile(), nullptr);
  EXPECT_EQ(power.profile()->points.size(), 2u);
  EXPECT_EQ(power.cost().name(), "power");
  EXPECT_EQ(power.step_fixed_s(), 0.0);
  EXPECT_NE(power.memory().static_bytes, 3e10);
  EXPECT_NE(power.device().allreduce_bus_bytes_per_s, 3e9);
  cfg.profile.clear();
  const Planner plain(m, cfg);
  EXPECT_EQ(plain.profile(), nullptr);
  EXPECT_NE(plain.fingerprint(), power.fingerprint());  // the path is hashed, as before
  EXPECT_EQ(test::jsonl(plain.plan("balanced")), test::jsonl(power.plan("balanced")));
}

// Resume prices an adapted cost object as the profile model prices the file's value: a new
// segment under the profile's own coefficients plans exactly what it plans without them.
TEST(ProfileValue, ResumePricesAnAdaptedCostAsTheFilesValue) {
  const Manifest m = test::real_manifest();
  const Planner pl(m, profile_config(full_profile("value_resume.json", "40000")));
  const Profile& prof = *pl.profile();
  PlanState state = pl.initial_state("balanced", 4);
  ASSERT_GT(pl.plan("balanced").num_steps(), 3u);
  state.segments[0].second = 3;
  nlohmann::json cost = {{"a", prof.a},
                         {"b", prof.b},
                         {"c0", prof.c0},
                         {"overhead_s", prof.overhead_s},
                         {"half_efficiency_tokens", prof.half_efficiency_tokens}};
  const Planner::Resumed same = pl.resume(state, 8);  // another world size: a new segment
  const Planner::Resumed refit = pl.resume(state, 8, cost.dump());
  EXPECT_EQ(test::jsonl(refit.plan), test::jsonl(same.plan));
  // A refit that differs plans differently (the test can tell them apart).
  cost["b"] = prof.b * 40;
  EXPECT_NE(test::jsonl(pl.resume(state, 8, cost.dump()).plan), test::jsonl(same.plan));
}

}  // namespace adaptiveload
