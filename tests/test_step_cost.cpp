// A calibrated profile's "step" (the optimizer step, once per global step): read from the
// profile, priced in every step of the simulated epoch in both sync modes, part of the
// fingerprint, and read by balanced's choice of the step count.
#include <gtest/gtest.h>

#include <string>

#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/util/error.h"
#include "planner_fixture.h"
#include "profile_fixture.h"

using namespace adaptiveload;

namespace {

std::string write_profile(const std::string& name, const std::string& step) {
  return test::write_profile(name, "step", step);
}
PlannerConfig config(const std::string& profile, const char* sync) {
  return test::profile_config(profile, sync, 4);
}
std::string error_of(const std::string& profile) { return test::profile_error(profile); }

}  // namespace

TEST(StepCost, ProfileStepIsPricedOnceEveryStepInBothSyncModes) {
  const Manifest m = test::real_manifest();
  for (const char* sync : {"step", "micro"}) {
    // One path, rewritten: the fingerprint hashes the path too, so only the step may differ.
    const std::string path = write_profile("step_priced.json", "");
    const Planner a(m, config(path, sync));
    write_profile("step_priced.json", R"({"optimizer":"AdamW","optimizer_s":0.05})");
    const Planner b(m, config(path, sync));
    EXPECT_EQ(a.step_fixed_s(), 0.0);
    EXPECT_DOUBLE_EQ(b.step_fixed_s(), 0.05);
    EXPECT_NE(a.fingerprint(), b.fingerprint())
        << sync << ": a state must not resume under another step price";
    // The same plan simulated under each: 50 ms more a step, nothing else.
    for (const char* strategy : {"equal_tokens", "dual"}) {
      const Plan p = a.plan(strategy);
      const Metrics ma = a.simulate(p), mb = b.simulate(p);
      EXPECT_NEAR(mb.epoch_time_s - ma.epoch_time_s, 0.05 * double(p.num_steps()),
                  1e-6 * ma.epoch_time_s)
          << sync << " " << strategy;
      EXPECT_DOUBLE_EQ(mb.collective_s, ma.collective_s)
          << sync << ": the optimizer is not a collective";
    }
  }
}

TEST(StepCost, ShardedRanksStepTheirShareOfTheOptimizer) {
  // FSDP: each of the W ranks steps the optimizer over its 1 / W of the parameters.
  const Manifest m = test::real_manifest();
  PlannerConfig cfg = config(write_profile("step_fsdp.json", R"({"optimizer_s":0.08})"), "micro");
  cfg.sharding = "fsdp";
  const Planner sharded(m, cfg);
  EXPECT_DOUBLE_EQ(sharded.step_fixed_s(), 0.02);
  EXPECT_DOUBLE_EQ(sharded.step_fixed_s(8), 0.01);
  cfg.sharding = "none";
  EXPECT_DOUBLE_EQ(Planner(m, cfg).step_fixed_s(8), 0.08);
}

TEST(StepCost, BalancedTakesFewerStepsWhenEachStepCostsMore) {
  // Free global batch: balanced chooses its step count (step sync) or its slots, one step
  // each (micro sync), from the epoch time, which a per-step cost raises by that much a step.
  // A step as costly as many micro-batches leaves it fewer steps (never more), and the plan
  // keeps its contract.
  const Manifest m = test::real_manifest();
  // (4 ranks in micro sync take their fewest slots already: 16, where more slots balance.)
  for (const auto& [sync, W] : {std::pair{"step", 4}, std::pair{"micro", 16}}) {
    PlannerConfig cfg = config(write_profile("step_free_none.json", ""), sync);
    cfg.world_size = W;
    cfg.global_batch = "free";
    cfg.comp_budget = 1e12;  // given, so the choice is balanced's own, not dual's M_comp search
    const Planner a(m, cfg);
    cfg.profile = write_profile("step_free_big.json", R"({"optimizer_s":30})");
    const Planner b(m, cfg);
    const Plan pa = a.plan("balanced"), pb = b.plan("balanced");
    test::expect_plan_contract(b, pb, std::string(sync) + ": balanced with a 30 s step");
    EXPECT_LT(pb.num_steps(), pa.num_steps()) << sync;
    EXPECT_LT(b.simulate(pb).epoch_time_s, b.simulate(pa).epoch_time_s)
        << sync
        << ": the plan chosen under the step cost is faster under it than the one chosen without";
  }
}

TEST(StepCost, DualsComputeBudgetSearchCountsTheStep) {
  // dual's automatic M_comp is the one whose plan simulates fastest: with costly steps, larger
  // batches (fewer steps) win, in both sync modes.
  const Manifest m = test::real_manifest();
  for (const char* sync : {"step", "micro"}) {
    PlannerConfig cfg = config(write_profile("step_dual_none.json", ""), sync);
    cfg.world_size = 16;
    cfg.global_batch = "free";
    const Planner a(m, cfg);
    cfg.profile = write_profile("step_dual_big.json", R"({"optimizer_s":30})");
    const Planner b(m, cfg);
    EXPECT_GT(b.comp_budget(), a.comp_budget()) << sync;
    EXPECT_LT(b.plan("dual").num_steps(), a.plan("dual").num_steps()) << sync;
  }
}

TEST(StepCost, BadStepFieldsAreErrorsNamingThem) {
  EXPECT_EQ(error_of(write_profile("step_ok.json", R"({"optimizer_s":0})")), "");
  EXPECT_NE(error_of(write_profile("step_str.json", R"({"optimizer_s":"fast"})"))
                .find("'optimizer_s' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(write_profile("step_neg.json", R"({"optimizer_s":-1})"))
                .find("'optimizer_s' must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of(write_profile("step_missing.json", R"({"optimizer":"AdamW"})"))
                .find("missing 'optimizer_s'"),
            std::string::npos);
  EXPECT_NE(error_of(write_profile("step_num.json", "0.1")).find("'step' must be an object"),
            std::string::npos);
  EXPECT_NE(
      error_of(write_profile("step_huge.json", R"({"optimizer_s":1e9})")).find("plausible limit"),
      std::string::npos);
}
