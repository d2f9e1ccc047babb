// Packed micro-batches in the planner (strategy/packing.h) on small hand-made problems: the
// greedy token-budget packer and balanced with packing keep every sample exactly once, every
// pack within its token budget and device memory, the same micro-batch count on every rank of
// a step in micro sync, and balanced levels the ranks better than the greedy packer. No data
// files, no Planner.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <sstream>

#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/plan/plan_io.h"
#include "adaptiveload/sim/metrics.h"
#include "adaptiveload/strategy/packing.h"
#include "adaptiveload/strategy/plan_writer.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

// Long clips (32,760 tokens), short clips (8,190), images (1,560 and 3,600); `mix` samples of
// each of the four buckets in turn, ids 0..n-1.
struct Problem {
  std::vector<Bucket> buckets;
  std::vector<uint16_t> sample_bucket;
  std::unique_ptr<CostModel> cost;
  BalancedProblem pr;  // packed balanced's own problem (packing on)
  Problem(uint32_t n, int world_size, SyncMode sync, uint64_t steps = 0) {
    buckets.resize(4);
    const int64_t tokens[] = {32760, 8190, 1560, 3600};
    const int frames[] = {81, 21, 1, 1};
    for (size_t b = 0; b < 4; ++b) buckets[b].tokens = tokens[b], buckets[b].frames = frames[b];
    // Long clips are rarer, as in the real mixes: one in eight samples.
    for (uint32_t i = 0; i < n; ++i) sample_bucket.push_back(uint16_t(i % 8 == 0 ? 0 : 1 + i % 3));
    auto c = std::make_unique<PowerCost>(1e-9, 1.6);
    c->overhead_s = 0.02, c->half_efficiency_tokens = 4000;
    cost = std::move(c);
    pr.buckets = &buckets;
    pr.sample_bucket = &sample_bucket;
    for (uint32_t i = 0; i < n; ++i) pr.pool.push_back(i);
    pr.cost = cost.get();
    pr.world_size = world_size;
    pr.seed = 3;
    pr.layout.sync = sync;
    pr.mem_budget_tokens = 80000;
    pr.memory.static_bytes = 20e9, pr.memory.m0 = 1e6, pr.memory.m1 = 2e5;
    pr.usable_bytes = 40e9;  // 20 GB for samples: at most 100,000 tokens by bytes
    pr.step_budget_s = 60;
    pr.packing = true;
    if (steps) {
      pr.batch_kind = BatchKind::kSamples;
      pr.batch_target = double(n) / double(steps);
    }
    pr.max_batch_memory.assign(4, 1000);
  }
  SimEnv env() const {
    SimEnv e;
    e.buckets = &buckets;
    e.sample_bucket = &sample_bucket;
    e.cost = cost.get();
    e.memory = pr.memory;
    e.device_memory_bytes = pr.usable_bytes;
    e.layout = pr.layout;
    return e;
  }
};

// Every sample of the pool is trained exactly once (or dropped), padded repeats aside; every
// micro-batch fits the pack room; micro-batch buckets name their samples' bucket or kPackedBucket.
void expect_sound(const Problem& p, const Plan& plan) {
  std::vector<int> seen(p.sample_bucket.size(), 0);
  const PackRoom room = PackRoom::of(p.pr);
  for (const MicroBatch& mb : plan.micro_batches) {
    int64_t tokens = 0;
    double bytes = 0;
    bool mixed = false;
    for (uint32_t k = 0; k < mb.count; ++k) {
      const uint32_t id = plan.ids(mb)[k];
      if (!mb.padded) ++seen[id];
      const int64_t S = p.buckets[p.sample_bucket[id]].tokens;
      tokens += S, bytes += room.sample_bytes(S);
      mixed = mixed || p.sample_bucket[id] != p.sample_bucket[plan.ids(mb)[0]];
    }
    EXPECT_LE(tokens, p.pr.mem_budget_tokens);
    EXPECT_LE(p.pr.memory.static_bytes + bytes, p.pr.usable_bytes);
    EXPECT_EQ(mb.bucket, mixed ? kPackedBucket : p.sample_bucket[plan.ids(mb)[0]]);
  }
  for (uint32_t id : plan.dropped) ++seen[id];
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "sample " << i;
  EXPECT_TRUE(plan.packed);
}

TEST(GreedyPacks, FillsEachPackUntilTheNextSampleDoesNotFit) {
  Problem p(300, 4, SyncMode::kStep);
  const PackRoom room = PackRoom::of(p.pr);
  EXPECT_EQ(room.max_tokens, 80000);
  const Packs packs = greedy_packs(p.pr, room);
  std::vector<int> seen(300, 0);
  for (uint64_t k = 0; k < packs.size(); ++k) {
    int64_t tokens = 0;
    double bytes = 0;
    for (uint64_t i = packs.begin[k]; i < packs.begin[k + 1]; ++i) {
      ++seen[packs.ids[i]];
      const int64_t S = p.buckets[p.sample_bucket[packs.ids[i]]].tokens;
      EXPECT_TRUE(room.fits(tokens, bytes, S));
      tokens += S, bytes += room.sample_bytes(S);
    }
    if (k + 1 < packs.size()) {  // closed because the next sample did not fit
      const int64_t next = p.buckets[p.sample_bucket[packs.ids[packs.begin[k + 1]]]].tokens;
      EXPECT_FALSE(room.fits(tokens, bytes, next));
    }
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  // Seeded: the same packs again, other packs for another seed.
  EXPECT_EQ(greedy_packs(p.pr, room).ids, packs.ids);
  p.pr.seed = 4;
  EXPECT_NE(greedy_packs(p.pr, room).ids, packs.ids);
}

TEST(PackBucket, NamesTheBucketOfAOneBucketPack) {
  Problem p(16, 2, SyncMode::kStep);
  const uint32_t same[] = {1, 4, 7}, mixed[] = {1, 2};
  EXPECT_EQ(pack_bucket(p.pr, same, 3), p.sample_bucket[1]);
  EXPECT_EQ(pack_bucket(p.pr, mixed, 2), kPackedBucket);
}

TEST(PackedBalanced, StepSyncKeepsEverySampleOnceAndLevelsTheRanks) {
  Problem p(800, 4, SyncMode::kStep, 10);
  const Plan plan = plan_balanced_packed(p.pr);
  expect_sound(p, plan);
  EXPECT_EQ(plan.num_steps(), 10u);
  const Metrics bal = simulate(plan, p.env());
  const Metrics greedy = simulate(plan_greedy_pack(p.pr), p.env());
  EXPECT_LT(bal.imbalance, 0.03);
  EXPECT_LT(bal.imbalance, greedy.imbalance);
  EXPECT_GE(bal.throughput_samples_per_s, greedy.throughput_samples_per_s);
  std::ostringstream out;
  write_plan_jsonl(plan, out);
  EXPECT_NE(out.str().find("\"packed\":true"), std::string::npos);
}

TEST(PackedBalanced, MicroSyncGivesEveryRankOfAStepTheSameSlots) {
  Problem p(800, 4, SyncMode::kMicro, 10);
  const Plan plan = plan_balanced_packed(p.pr);
  expect_sound(p, plan);
  for (size_t t = 0; t < plan.num_steps(); ++t) {
    const auto [b0, e0] = plan.rank_range(t, 0);
    for (int r = 1; r < 4; ++r) {
      const auto [b, e] = plan.rank_range(t, r);
      EXPECT_EQ(e - b, e0 - b0) << "step " << t << " rank " << r;
    }
  }
  const Metrics m = simulate(plan, p.env());
  EXPECT_LT(m.imbalance, 0.05);
  // The global batch held: tokens per step within 10% of their mean.
  EXPECT_LE(m.global_batch_tokens_max_dev, kMaxBatchDev);
}

TEST(PackedBalanced, FreeStepCountStaysWithinTheStepBudget) {
  Problem p(400, 2, SyncMode::kStep);
  const Plan plan = plan_balanced_packed(p.pr);
  expect_sound(p, plan);
  const std::vector<double> t = rank_times(plan, p.env());
  for (double x : t) EXPECT_LE(x, p.pr.step_budget_s * 1.1);
}

TEST(PackedBalanced, FewerSamplesThanRanksPadsOrDropsAndLosesNothing) {
  Problem p(3, 4, SyncMode::kStep);
  const Plan padded = plan_balanced_packed(p.pr);
  expect_sound(p, padded);
  EXPECT_EQ(padded.num_steps(), 1u);
  EXPECT_GT(padded.padded_samples, 0);
  p.pr.end_policy = EndPolicy::kDrop;
  const Plan dropped = plan_balanced_packed(p.pr);
  expect_sound(p, dropped);
  EXPECT_EQ(dropped.dropped.size(), 3u);
  EXPECT_EQ(dropped.num_steps(), 0u);
}

TEST(GreedyPack, LastStepPaddedOrDropped) {
  Problem p(301, 4, SyncMode::kMicro);
  const Plan padded = plan_greedy_pack(p.pr);
  expect_sound(p, padded);
  for (size_t t = 0; t < padded.num_steps(); ++t)
    for (int r = 0; r < 4; ++r) {
      const auto [b, e] = padded.rank_range(t, r);
      EXPECT_EQ(e - b, 1u);  // one pack a rank-step when the batch is free
    }
  p.pr.end_policy = EndPolicy::kDrop;
  const Plan dropped = plan_greedy_pack(p.pr);
  expect_sound(p, dropped);
  EXPECT_EQ(dropped.padded_samples, 0);
}

TEST(PackRoom, RefusesAProblemWithoutAMemoryBudget) {
  Problem p(8, 2, SyncMode::kStep);
  p.pr.mem_budget_tokens = 0;
  EXPECT_THROW(PackRoom::of(p.pr), ConfigError);
}

}  // namespace
}  // namespace adaptiveload
