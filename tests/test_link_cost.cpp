// A calibrated profile's "link" (the ring all-reduce `calibrate --allreduce-ranks N` measured on
// the user's host): it replaces the device preset's bandwidth and latency in every collective
// the planner prices, in both sync modes, and is part of the fingerprint.
#include <gtest/gtest.h>

#include <string>

#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/sim/metrics.h"
#include "adaptiveload/util/error.h"
#include "planner_fixture.h"
#include "profile_fixture.h"

using namespace adaptiveload;

namespace {

std::string write_profile(const std::string& name, const std::string& link) {
  return test::write_profile(name, "link", link);
}
PlannerConfig config(const std::string& profile, const char* sync, int W) {
  return test::profile_config(profile, sync, W);
}
std::string error_of(const std::string& profile) { return test::profile_error(profile); }

}  // namespace

TEST(LinkCost, MeasuredLinkPricesTheStepAllReduce) {
  const Manifest m = test::real_manifest();
  // One path, rewritten: the fingerprint hashes the path too, so only the link may differ.
  const std::string path = write_profile("link_step.json", "");
  const Planner a(m, config(path, "step", 4));
  write_profile("link_step.json", R"({"backend":"gloo","ranks":2,"allreduce_bus_bytes_per_s":2e8,
    "allreduce_latency_s":4e-4})");
  const Planner b(m, config(path, "step", 4));
  EXPECT_EQ(b.device().allreduce_bus_bytes_per_s, 2e8);
  EXPECT_EQ(b.device().allreduce_latency_s, 4e-4);
  // The preset's link is not the measured one (else this test could not tell them apart).
  EXPECT_NE(a.device().allreduce_bus_bytes_per_s, 2e8);
  const double ring = 2.0 * 3 / 4 * b.model().params * 4.0 / 2e8 + 2.0 * 3 * 4e-4;
  EXPECT_DOUBLE_EQ(b.sim_env(4).allreduce_s, ring);
  EXPECT_DOUBLE_EQ(b.sim_env(4).allreduce_s,
                   ring_allreduce_seconds(b.model().params * 4.0, 4, 2e8, 4e-4));
  // At another world size (elastic resume), the same link on that ring.
  EXPECT_DOUBLE_EQ(b.sim_env(8).allreduce_s,
                   ring_allreduce_seconds(b.model().params * 4.0, 8, 2e8, 4e-4));
  EXPECT_NE(a.fingerprint(), b.fingerprint()) << "a state must not resume under another link";
  // With the bytes of the gradients it timed (the model calibrated), the ring moves those.
  write_profile("link_step.json", R"({"allreduce_bus_bytes_per_s":2e8,"allreduce_latency_s":4e-4,
    "gradient_bytes":646144})");
  const Planner c(m, config(path, "step", 4));
  EXPECT_DOUBLE_EQ(c.sim_env(4).allreduce_s, ring_allreduce_seconds(646144, 4, 2e8, 4e-4));
  EXPECT_NE(c.fingerprint(), b.fingerprint());
  // The same plan simulated under each: the all-reduce's difference, once a step.
  for (const char* strategy : {"equal_tokens", "dual"}) {
    const Plan p = a.plan(strategy);
    const Metrics ma = a.simulate(p), mb = b.simulate(p);
    const double d = double(p.num_steps()) * (b.sim_env(4).allreduce_s - a.sim_env(4).allreduce_s);
    EXPECT_NEAR(mb.epoch_time_s - ma.epoch_time_s, d, 1e-6 * ma.epoch_time_s) << strategy;
    EXPECT_NEAR(mb.collective_s - ma.collective_s, d, 1e-6 * ma.epoch_time_s) << strategy;
  }
}

TEST(LinkCost, MeasuredLinkPricesTheSlotCollectivesInMicroSync) {
  // FSDP: a slot's all-gathers and reduce-scatter ride the same link; a slower one costs more.
  const Manifest m = test::real_manifest();
  const std::string path = write_profile("link_micro.json", "");
  PlannerConfig cfg = config(path, "micro", 8);
  cfg.sharding = "fsdp";
  const Planner a(m, cfg);
  write_profile("link_micro.json",
                R"({"allreduce_bus_bytes_per_s":1e8,"allreduce_latency_s":1e-3})");
  const Planner b(m, cfg);
  const Plan p = a.plan("equal_tokens");
  EXPECT_GT(b.simulate(p).collective_s, a.simulate(p).collective_s);
  EXPECT_GT(b.sim_env(8).layout.slot_comm_s, a.sim_env(8).layout.slot_comm_s);
  test::expect_plan_contract(b, b.plan("balanced"), "balanced under a measured link");
}

TEST(LinkCost, BadLinkFieldsAreRefusedByName) {
  for (const char* link :
       {R"("fast")", R"({"allreduce_latency_s":1e-4})", R"({"allreduce_bus_bytes_per_s":1e9})",
        R"({"allreduce_bus_bytes_per_s":0,"allreduce_latency_s":1e-4})",
        R"({"allreduce_bus_bytes_per_s":1e9,"allreduce_latency_s":-1})",
        R"({"allreduce_bus_bytes_per_s":"1e9","allreduce_latency_s":1e-4})",
        R"({"allreduce_bus_bytes_per_s":1e9,"allreduce_latency_s":1e-4,"gradient_bytes":-4})",
        R"({"allreduce_bus_bytes_per_s":1e9,"allreduce_latency_s":1e-4,"gradient_bytes":"x"})"}) {
    const std::string e = error_of(write_profile("link_bad.json", link));
    EXPECT_NE(e, "") << link;
    EXPECT_NE(e.find("link"), std::string::npos) << link << ": " << e;
    EXPECT_NE(e.find("link_bad.json"), std::string::npos) << e;
    if (std::string(link).find("gradient_bytes") != std::string::npos) {  // named as num() names it
      EXPECT_NE(e.find("'link.gradient_bytes'"), std::string::npos) << link << ": " << e;
    }
  }
  EXPECT_EQ(error_of(write_profile("link_ok.json",
                                   R"({"allreduce_bus_bytes_per_s":1e9,"allreduce_latency_s":0})")),
            "");
}
