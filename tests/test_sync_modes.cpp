// Sync modes (plan/layout.h) and the user's global batch: micro-mode plans give every rank
// the same number of micro-batches in every step, the simulator charges each slot, states
// and plans of the other mode are refused, and every strategy keeps the global batch.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "adaptiveload/util/error.h"
#include "planner_fixture.h"

namespace adaptiveload {
namespace {

using test::expect_plan_contract;
using test::real_manifest;

const Manifest& shared_manifest() {
  static const Manifest m = real_manifest();
  return m;
}

PlannerConfig config(const std::string& model, int W, const std::string& sharding,
                     const std::string& sync = "auto") {
  PlannerConfig c;
  c.model = model;
  c.world_size = W;
  c.sharding = sharding;
  c.sync = sync;
  return c;
}

// Every step gives every rank the same number of micro-batches.
void expect_lockstep_slots(const Plan& p, const std::string& ctx) {
  for (size_t t = 0; t < p.num_steps(); ++t) {
    const auto [b0, e0] = p.rank_range(t, 0);
    for (int r = 1; r < p.world_size; ++r) {
      const auto [b, e] = p.rank_range(t, r);
      ASSERT_EQ(e - b, e0 - b0) << ctx << ": step " << t << " rank " << r;
    }
  }
}

TEST(SyncModes, DefaultFollowsSharding) {
  EXPECT_EQ(Planner(shared_manifest(), config("wan2.1-1.3b", 8, "none")).sync(), SyncMode::kStep);
  EXPECT_EQ(Planner(shared_manifest(), config("wan2.1-1.3b", 8, "fsdp")).sync(), SyncMode::kMicro);
  // auto sharding: the 14B state does not fit one H200 unsharded, so it is sharded -> micro.
  EXPECT_EQ(Planner(shared_manifest(), config("wan2.1-14b", 16, "auto")).sync(), SyncMode::kMicro);
  EXPECT_EQ(Planner(shared_manifest(), config("wan2.1-1.3b", 8, "fsdp", "step")).sync(),
            SyncMode::kStep);
  EXPECT_THROW(Planner(shared_manifest(), config("wan2.1-1.3b", 8, "none", "sometimes")),
               ConfigError);
}

// The acceptance case: Wan 2.1 14B, 16 x H200, FSDP, Taichi-HD + COCO.
TEST(SyncModes, MicroModeWan14bFsdpEveryRankSameCountAndBalancedWins) {
  Planner pl(shared_manifest(), config("wan2.1-14b", 16, "fsdp"));
  ASSERT_EQ(pl.sync(), SyncMode::kMicro);
  std::map<std::string, Metrics> m;
  for (const auto& s : strategies()) {
    Plan p = pl.plan(s.name);
    EXPECT_EQ(p.sync, SyncMode::kMicro) << s.name;
    expect_plan_contract(pl, p, s.name);
    expect_lockstep_slots(p, s.name);
    // The written JSONL says so, and every line gives every rank the same count.
    std::istringstream lines(test::jsonl(p));
    std::string line;
    size_t n = 0;
    while (std::getline(lines, line)) {
      auto j = nlohmann::json::parse(line);
      ASSERT_EQ(j["sync"], "micro");
      for (const auto& r : j["ranks"])
        ASSERT_EQ(r.size(), j["ranks"][0].size()) << s.name << " line " << n;
      ++n;
    }
    EXPECT_EQ(n, p.num_steps());
    m[s.name] = pl.simulate(p);
  }
  EXPECT_LT(m["balanced"].imbalance, 0.03);
  EXPECT_GT(m["balanced"].throughput_samples_per_s, m["dual"].throughput_samples_per_s);
  EXPECT_GT(m["balanced"].throughput_samples_per_s, m["equal_tokens"].throughput_samples_per_s);
  EXPECT_GT(m["balanced"].collective_s, 0);
  for (const auto& [name, x] : m)
    EXPECT_EQ(x.steps, m["equal_tokens"].steps) << name << ": same global batch";
}

TEST(SyncModes, BothModesOnWan13bWithCollectiveTime) {
  for (const SyncModeName& mode : kSyncModes) {  // every mode of the registry
    const std::string sync = mode.name;
    Planner pl(shared_manifest(), config("wan2.1-1.3b", 16, "fsdp", sync));
    std::map<std::string, Metrics> m;
    for (const auto& s : strategies()) {
      Plan p = pl.plan(s.name);
      expect_plan_contract(pl, p, sync + " " + s.name);
      if (mode.lockstep_slots) expect_lockstep_slots(p, s.name);
      m[s.name] = pl.simulate(p);
      EXPECT_EQ(m[s.name].sync, sync);
      EXPECT_GT(m[s.name].collective_s, 0) << sync << " " << s.name;
    }
    EXPECT_LT(m["balanced"].imbalance, 0.03) << sync;
    for (const char* other : {"dual", "equal_tokens", "fixed"})
      EXPECT_GT(m["balanced"].throughput_samples_per_s, m[other].throughput_samples_per_s)
          << sync << " vs " << other;
  }
}

TEST(SyncModes, SimulatorChargesEverySlotItsSlowestMicroBatchAndExposedCollectives) {
  Planner pl(shared_manifest(), config("wan2.1-1.3b", 2, "fsdp", "micro"));
  // A hand-made micro-mode plan: one step, two slots; rank 0 runs a long then a short
  // micro-batch, rank 1 the opposite.
  const auto& bk = pl.bucketing();
  uint16_t longest = 0, shortest = 0;
  for (uint16_t b = 0; b < bk.buckets.size(); ++b) {
    if (!bk.bucket_counts[b]) continue;
    if (!bk.bucket_counts[longest] || bk.buckets[b].tokens > bk.buckets[longest].tokens)
      longest = b;
    if (!bk.bucket_counts[shortest] || bk.buckets[b].tokens < bk.buckets[shortest].tokens)
      shortest = b;
  }
  Plan p;
  p.strategy = "hand";
  p.world_size = 2;
  p.sync = SyncMode::kMicro;
  p.sample_ids = {0, 1, 2, 3};
  p.micro_batches = {
      {0, 1, longest, 0}, {1, 1, shortest, 0}, {2, 1, shortest, 0}, {3, 1, longest, 0}};
  p.rank_begin = {0, 2, 4};
  p.steps = {StepInfo{0, 4, 0}};
  const SimEnv env = pl.sim_env(2);
  const double tl = env.cost->microbatch_time(1, bk.buckets[longest]);
  const double ts = env.cost->microbatch_time(1, bk.buckets[shortest]);
  ASSERT_GT(env.layout.slot_comm_s, 0);
  const Metrics m = simulate(p, env);
  const double comm = 2 * env.layout.exposed_slot_comm(tl);
  EXPECT_NEAR(m.epoch_time_s, 2 * tl + comm, 1e-9 * m.epoch_time_s);
  EXPECT_NEAR(m.collective_s, comm, 1e-12 + 1e-9 * comm);
  // Idle inside both slots, though both ranks do the same total work.
  EXPECT_NEAR(m.imbalance, 1 - (tl + ts) / (2 * tl), 1e-9);
  // The same plan in step mode would be balanced; micro mode sees the slots.
  Plan q = p;
  q.sync = SyncMode::kStep;
  EXPECT_THROW(simulate(q, env), ConfigError);
  // Unequal counts are refused in micro mode, naming the ranks.
  Plan r = p;
  r.rank_begin = {0, 1, 4};
  try {
    simulate(r, env);
    ADD_FAILURE() << "unequal micro-batch counts accepted in micro mode";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("same count on every rank"), std::string::npos)
        << e.what();
  }
}

TEST(SyncModes, ExposedCollectivesFollowTheOverlapModel) {
  ParallelLayout l;
  l.sync = SyncMode::kMicro;
  l.slot_comm_s = 1.0;
  l.overlap = 0.7;
  EXPECT_NEAR(l.exposed_slot_comm(10.0), 0.3,
              1e-12);  // long compute: only the part that cannot overlap
  EXPECT_NEAR(l.exposed_slot_comm(0.2), 0.8, 1e-12);  // short compute hides only itself
  EXPECT_NEAR(l.exposed_slot_comm(0.0), 1.0, 1e-12);
}

TEST(SyncModes, StateOfTheOtherModeIsRefusedByName) {
  Planner step(shared_manifest(), config("wan2.1-1.3b", 8, "fsdp", "step"));
  Planner micro(shared_manifest(), config("wan2.1-1.3b", 8, "fsdp", "micro"));
  PlanState s = step.initial_state("balanced");
  EXPECT_EQ(s.sync, SyncMode::kStep);
  PlanState m = micro.initial_state("balanced");
  EXPECT_EQ(m.sync, SyncMode::kMicro);
  // Round trip through JSON keeps the mode; a state without it is a step-mode one.
  EXPECT_EQ(state_from_json(state_to_json(m)).sync, SyncMode::kMicro);
  EXPECT_EQ(state_from_json(state_to_json(s)).sync, SyncMode::kStep);
  try {
    micro.resume(s, 8);
    ADD_FAILURE() << "micro planner accepted a step-mode state";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("step-sync plan"), std::string::npos) << e.what();
  }
  EXPECT_THROW(step.resume(m, 8), InputError);
  std::string bad = state_to_json(m);
  bad.replace(bad.find("\"micro\""), 7, "\"fsdp\"");
  EXPECT_THROW(state_from_json(bad), InputError);
}

TEST(SyncModes, ElasticResumeInMicroModeStaysLockstepAndLosesNothing) {
  Planner pl(shared_manifest(), config("wan2.1-1.3b", 8, "fsdp", "micro"));
  PlanState st = pl.initial_state("balanced");
  Planner::Resumed r0 = pl.resume(st, 8);
  const size_t done = r0.plan.num_steps() / 3;
  st.segments.back().second = int64_t(done);
  std::vector<uint32_t> trained = test::trained_ids(r0.plan, 0, done);
  Planner::Resumed r1 = pl.resume(st, 12);
  EXPECT_EQ(r1.plan.world_size, 12);
  EXPECT_EQ(r1.plan.sync, SyncMode::kMicro);
  expect_lockstep_slots(r1.plan, "after elastic resume");
  std::vector<uint32_t> rest = test::trained_ids(r1.plan);
  trained.insert(trained.end(), rest.begin(), rest.end());
  trained.insert(trained.end(), r1.plan.dropped.begin(), r1.plan.dropped.end());
  std::sort(trained.begin(), trained.end());
  EXPECT_EQ(trained, test::usable_ids(pl));
}

// Every strategy at one global batch, and how close each step stays to it.
TEST(GlobalBatch, EveryStrategyKeepsTheStepCountAndTheTokensPerStep) {
  for (const int W : {8, 16}) {
    PlannerConfig c = config("wan2.1-1.3b", W, "none");
    Planner pl(shared_manifest(), c);
    ASSERT_EQ(pl.batch_kind(), BatchKind::kTokens);
    const Metrics eq = pl.simulate(pl.plan("equal_tokens"));
    for (const auto& s : strategies()) {
      const Metrics m = pl.simulate(pl.plan(s.name));
      EXPECT_EQ(m.steps, eq.steps) << W << " " << s.name;
      // balanced keeps each step's tokens within 15% of the mean (measured: under 10%).
      if (std::string(s.name) == "balanced") {
        EXPECT_LT(m.global_batch_tokens_max_dev, 0.15) << W;
      }
    }
    // balanced leads at this global batch, under 1% idle.
    const Metrics bal = pl.simulate(pl.plan("balanced"));
    EXPECT_LT(bal.imbalance, 0.01) << W;
    for (const char* other : {"dual", "equal_tokens", "fixed"})
      EXPECT_GT(bal.throughput_samples_per_s, pl.simulate(pl.plan(other)).throughput_samples_per_s)
          << W << " " << other;
  }
}

TEST(GlobalBatch, StepsSamplesAndTokensTargets) {
  PlannerConfig c = config("wan2.1-1.3b", 8, "none");
  c.global_batch = "steps:60";
  Planner pl(shared_manifest(), c);
  for (const auto& s : strategies()) {
    EXPECT_EQ(pl.plan(s.name).num_steps(), 60u) << s.name;
  }
  c.global_batch = "samples:200";
  Planner ps(shared_manifest(), c);
  const double n = double(test::usable_ids(ps).size());
  EXPECT_EQ(ps.plan("balanced").num_steps(), size_t(std::llround(n / 200)));
  // Per step: the samples of balanced's steps stay near the target.
  const Metrics m = ps.simulate(ps.plan("balanced"));
  EXPECT_NEAR(m.global_batch_samples_mean, n / double(m.steps), 1e-9);
  c.global_batch = "free";
  Planner pf(shared_manifest(), c);
  // free: the one-micro-batch strategies run one micro-batch per rank per step.
  const Plan d = pf.plan("dual");
  EXPECT_EQ(d.micro_batches.size(), d.num_steps() * 8);
  for (const char* bad :
       {"steps:0", "steps:1.5", "batches:4", "tokens:-1", "samples:", "sometimes"}) {
    c.global_batch = bad;
    EXPECT_THROW(Planner(shared_manifest(), c), ConfigError) << bad;
  }
}

}  // namespace
}  // namespace adaptiveload

namespace adaptiveload {
namespace {

// A given global batch never costs balanced a sample (drop policy) nor fills rank-steps with
// repeats (pad policy), and micro sync keeps the step count too.
TEST(GlobalBatch, BalancedFillsEveryRankStepAtTheStepCountInBothPoliciesAndModes) {
  for (const SyncModeName& mode : kSyncModes) {
    const std::string sync = mode.name;
    for (const EndPolicy policy : {EndPolicy::kPad, EndPolicy::kDrop}) {
      for (const char* gb : {"steps:200", "samples:64", "auto"}) {
        PlannerConfig c = config("wan2.1-1.3b", 16, "none", sync);
        c.global_batch = gb;
        c.end_policy = policy;
        Planner pl(shared_manifest(), c);
        const std::string ctx = sync + " " + gb + (policy == EndPolicy::kDrop ? " drop" : " pad");
        const Plan b = pl.plan("balanced");
        expect_plan_contract(pl, b, ctx);
        // The same step count as the bucket loader (which, under drop, may drop its last step).
        const size_t eq = pl.plan("equal_tokens").num_steps();
        EXPECT_TRUE(b.num_steps() == eq || (policy == EndPolicy::kDrop && b.num_steps() == eq + 1))
            << ctx << ": " << b.num_steps() << " steps, equal_tokens " << eq;
        if (!mode.lockstep_slots) {
          EXPECT_EQ(b.padded_samples, 0) << ctx;
          EXPECT_TRUE(b.dropped.empty()) << ctx;
        }
        // micro: at most one slot of repeats (or of dropped samples), as a bucket loader's.
        EXPECT_LE(b.padded_samples + int64_t(b.dropped.size()), 16 * 64) << ctx;
      }
    }
  }
}

TEST(GlobalBatch, TinyManifestUnderDropKeepsItsSamples) {
  Manifest m;
  for (int i = 0; i < 64; ++i)
    m.add_row("img" + std::to_string(i) + ".jpg", "1", "512", "512", "", "mem", i,
              BadRowPolicy::kError);
  for (int i = 0; i < 4; ++i)
    m.add_row("clip" + std::to_string(i) + ".mp4", "81", "480", "832", "16", "mem", 64 + i,
              BadRowPolicy::kError);
  PlannerConfig c = config("wan2.1-1.3b", 4, "none", "step");
  c.global_batch = "samples:4";
  c.end_policy = EndPolicy::kDrop;
  Planner pl(m, c);
  const Plan b = pl.plan("balanced");
  expect_plan_contract(pl, b, "tiny drop");
  EXPECT_EQ(b.num_steps(), 17u);
  EXPECT_TRUE(b.dropped.empty());
}

}  // namespace
}  // namespace adaptiveload
