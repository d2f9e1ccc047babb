// A micro-batch priced by its shape (cost/shape.h, cost_model.h): a one-bucket shape costs
// exactly what the per-bucket formulas give (bit for bit, in every cost model variant and on
// sequence-parallel groups), a pack of several buckets pays one overhead and the ramp on its
// total tokens, its memory is the sum of its samples', and the simulator prices a packed
// micro-batch from its samples' buckets. No data files, no Planner.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/sim/metrics.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

// Image (1,560 tokens), short clip (14,040), long clip (32,760), two more images.
std::vector<Bucket> five_buckets() {
  std::vector<Bucket> b(5);
  const int64_t tokens[] = {1560, 14040, 32760, 880, 3600};
  const int frames[] = {1, 33, 81, 1, 1};
  for (size_t i = 0; i < b.size(); ++i) b[i].tokens = tokens[i], b[i].frames = frames[i];
  return b;
}

std::unique_ptr<CostModel> power_model() {
  auto c = std::make_unique<PowerCost>(2e-9, 1.7);
  c->overhead_s = 0.03;
  c->half_efficiency_tokens = 6000;
  return c;
}

std::unique_ptr<CostModel> analytic_model() {
  CostContext ctx;
  ctx.model = ModelPreset{};
  ctx.model.dim = 1536, ctx.model.ffn_dim = 8960, ctx.model.layers = 30, ctx.model.text_len = 512;
  ctx.device.peak_flops = 989e12, ctx.device.efficiency = 0.5;
  ctx.device.microbatch_overhead_s = 0.02, ctx.device.half_efficiency_tokens = 4096;
  return std::make_unique<AnalyticCost>(ctx);
}

TEST(MicroShape, MergesPartsOfOneBucketAndKeepsFirstAppearanceOrder) {
  const auto b = five_buckets();
  MicroShape s;
  EXPECT_TRUE(s.empty());
  s.add(b[2]);
  s.add(b[0], 3);
  s.add(b[2], 2);
  s.add(b[1], 0);  // nothing
  ASSERT_EQ(s.parts().size(), 2u);
  EXPECT_EQ(s.parts()[0].bucket, &b[2]);
  EXPECT_EQ(s.parts()[0].count, 3);
  EXPECT_EQ(s.parts()[1].bucket, &b[0]);
  EXPECT_EQ(s.parts()[1].count, 3);
  EXPECT_EQ(s.samples(), 6);
  EXPECT_EQ(s.tokens(), 3 * 32760 + 3 * 1560);
  EXPECT_FALSE(s.is_uniform());
}

TEST(MicroShape, MoreBucketsThanItsInlineRoomAndReuse) {
  const auto b = five_buckets();
  MicroShape s;
  for (int round = 0; round < 2; ++round) {  // the second round reuses the storage
    s.clear();
    for (int rep = 0; rep < 3; ++rep)
      for (size_t i = 0; i < b.size(); ++i) s.add(b[i], int64_t(i) + 1);
    ASSERT_EQ(s.parts().size(), 5u);
    int64_t tokens = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(s.parts()[i].bucket, &b[i]);
      EXPECT_EQ(s.parts()[i].count, 3 * (int64_t(i) + 1));
      tokens += 3 * (int64_t(i) + 1) * b[i].tokens;
    }
    EXPECT_EQ(s.samples(), 3 * 15);
    EXPECT_EQ(s.tokens(), tokens);
  }
  s.clear();
  s.add(b[1], 4);
  EXPECT_TRUE(s.is_uniform());
  EXPECT_EQ(s.samples(), 4);
}

TEST(ShapeCost, OneBucketIsTheBucketFormulaBitForBit) {
  const auto b = five_buckets();
  std::vector<std::unique_ptr<CostModel>> models;
  models.push_back(power_model());
  models.push_back(analytic_model());
  models.push_back(ProfileCost::from_cost_json(
      R"({"a":3e-7,"b":4e-12,"c0":0.002,"overhead_s":0.015,"half_efficiency_tokens":5000})"));
  SeqParallel sp;
  sp.sizes = 0b111, sp.a2a_s_per_token = 3e-9, sp.a2a_latency_s = 0.004;
  for (const auto& c : models)
    for (const Bucket& bk : b)
      for (int64_t n : {1, 2, 7, 64}) {
        const MicroShape s = MicroShape::uniform(n, bk);
        EXPECT_EQ(c->cost(s), c->microbatch_time(n, bk)) << c->name();
        EXPECT_EQ(c->work(s), c->marginal_time(n, bk)) << c->name();
        for (int g : {1, 2, 4}) {
          EXPECT_EQ(group_cost(*c, s, g, sp), group_microbatch_time(*c, n, bk, g, sp))
              << c->name() << " g " << g;
          EXPECT_EQ(group_work(*c, s, g, sp), double(n) * group_sample_time(*c, bk, g, sp))
              << c->name();
          // GroupCost, the cost model as a group sees it, prices the shape the same way.
          EXPECT_EQ(GroupCost(*c, g, sp).cost(s), group_cost(*c, s, g, sp))
              << c->name() << " g " << g;
        }
      }
}

TEST(ShapeCost, APackPaysOneOverheadAndTheRampOnItsTotalTokens) {
  const auto b = five_buckets();
  const auto c = power_model();
  MicroShape s;
  s.add(b[0], 3);  // three images
  s.add(b[2], 1);  // and a long clip
  const double w = 3 * c->sample_time(b[0]) + c->sample_time(b[2]);
  const double n = 3.0 * 1560 + 32760;
  EXPECT_DOUBLE_EQ(c->work(s), w);
  EXPECT_DOUBLE_EQ(c->cost(s), c->overhead_s + w * (1 + c->half_efficiency_tokens / n));
  // Cheaper than the two bucketed micro-batches it replaces: one overhead, a shorter ramp.
  EXPECT_LT(c->cost(s), c->microbatch_time(3, b[0]) + c->microbatch_time(1, b[2]));
  // Never cheaper than its work, and attention stays per sample: the long clip alone costs
  // more than a quarter of the pack of four.
  EXPECT_GT(c->cost(s), w);
  EXPECT_GT(c->sample_time(b[2]), 0.25 * c->work(s));
  // The order samples were added in does not change the price.
  MicroShape r;
  r.add(b[2], 1);
  r.add(b[0], 3);
  EXPECT_DOUBLE_EQ(c->cost(r), c->cost(s));
  EXPECT_EQ(c->cost(MicroShape()), 0.0);
}

TEST(ShapeCost, APackOnASequenceParallelGroup) {
  const auto b = five_buckets();
  const auto c = power_model();
  SeqParallel sp;
  sp.sizes = 0b11, sp.a2a_s_per_token = 3e-9, sp.a2a_latency_s = 0.004;
  MicroShape s;
  s.add(b[1], 2);
  s.add(b[2], 1);
  EXPECT_EQ(group_cost(*c, s, 1, sp), c->cost(s));
  const double wg = 2 * group_sample_time(*c, b[1], 2, sp) + group_sample_time(*c, b[2], 2, sp);
  EXPECT_DOUBLE_EQ(group_work(*c, s, 2, sp), wg);
  EXPECT_DOUBLE_EQ(group_cost(*c, s, 2, sp),
                   c->overhead_s + sp.a2a_latency_s +
                       wg * (1 + c->half_efficiency_tokens * 2 / (2.0 * 14040 + 32760)));
}

TEST(ShapeMemory, APackHoldsTheSumOfItsSamples) {
  const auto b = five_buckets();
  MemoryModel mm;
  mm.static_bytes = 40e9, mm.m0 = 5e6, mm.m1 = 2e5;
  for (int g : {1, 2, 4})
    EXPECT_EQ(mm.bytes(MicroShape::uniform(3, b[1]), g), mm.bytes(3, (b[1].tokens + g - 1) / g));
  MicroShape s;
  s.add(b[0], 2);
  s.add(b[2], 1);
  EXPECT_DOUBLE_EQ(mm.bytes(s), 40e9 + 3 * 5e6 + 2e5 * (2.0 * 1560 + 32760));
  // Each sample's tokens split over the group, rounded up per sample.
  EXPECT_DOUBLE_EQ(mm.bytes(s, 4), 40e9 + 3 * 5e6 + 2e5 * (2.0 * 390 + 8190));
  EXPECT_EQ(mm.bytes(MicroShape()), mm.static_bytes);
}

// A two-rank, one-step plan: rank 0 runs a pack of rows 0-3 (images and a long clip), rank 1
// a bucketed micro-batch of rows 4-5.
struct PackedPlan {
  std::vector<Bucket> buckets = five_buckets();
  std::vector<uint16_t> sample_bucket = {0, 2, 0, 0, 1, 1};
  std::unique_ptr<CostModel> cost = power_model();
  Plan plan;
  SimEnv env;
  PackedPlan() {
    plan.strategy = "packed-test";
    plan.world_size = 2;
    plan.sample_ids = {0, 1, 2, 3, 4, 5};
    plan.micro_batches = {{0, 4, kPackedBucket, 0}, {4, 2, 1, 0}};
    plan.rank_begin = {0, 1, 2};
    plan.steps.resize(1);
    plan.steps[0].samples = 6;
    plan.steps[0].tokens = 3 * 1560 + 32760 + 2 * 14040;
    env.buckets = &buckets;
    env.sample_bucket = &sample_bucket;
    env.cost = cost.get();
    env.memory.static_bytes = 10e9, env.memory.m1 = 1e5;
    env.device_memory_bytes = 80e9;
  }
};

TEST(SimulatePacked, PricesAPackFromItsSamplesBuckets) {
  PackedPlan p;
  MicroShape s;
  micro_shape(p.plan, 0, p.env, s);
  ASSERT_EQ(s.parts().size(), 2u);
  EXPECT_EQ(s.samples(), 4);
  EXPECT_EQ(s.tokens(), 3 * 1560 + 32760);
  const std::vector<double> t = rank_times(p.plan, p.env);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0], p.cost->cost(s));
  EXPECT_EQ(t[1], p.cost->microbatch_time(2, p.buckets[1]));
  const Metrics m = simulate(p.plan, p.env);
  EXPECT_EQ(m.samples, 6);
  EXPECT_EQ(m.tokens, 3 * 1560 + 32760 + 2 * 14040);
  EXPECT_DOUBLE_EQ(m.diversity, 3.0);  // buckets 0 and 2 in the pack, 1 beside it
  EXPECT_DOUBLE_EQ(m.epoch_time_s, std::max(t[0], t[1]));
  // Fixed costs: each micro-batch's time less its work.
  const double fixed = (t[0] - p.cost->work(s)) + (t[1] - p.cost->marginal_time(2, p.buckets[1]));
  EXPECT_DOUBLE_EQ(m.fixed_cost_fraction, fixed / (2 * m.epoch_time_s));
  EXPECT_DOUBLE_EQ(m.peak_memory_utilization_max,
                   std::max(p.env.memory.bytes(s), p.env.memory.bytes(2, 14040)) / 80e9);
}

TEST(SimulatePacked, RefusesAPackWithoutEachSamplesBucket) {
  PackedPlan p;
  p.env.sample_bucket = nullptr;
  EXPECT_THROW(simulate(p.plan, p.env), ConfigError);
  PackedPlan q;
  q.sample_bucket[1] = kNoBucket;  // a row the bucketing left out cannot be in a pack
  EXPECT_THROW(rank_times(q.plan, q.env), ConfigError);
}

}  // namespace
}  // namespace adaptiveload
