// Writing the plan (strategy/plan_writer.h) on hand-made micro-batches: rank-steps in
// step-major order, ids appended once and shared by a group's ranks, each step's totals with
// a group's micro-batch counted once and padded repeats apart. No data files.
#include <gtest/gtest.h>

#include <stdexcept>

#include "adaptiveload/strategy/plan_writer.h"

namespace adaptiveload {
namespace {

struct Problem {
  std::vector<Bucket> buckets;
  PlanProblem pr;
  Problem(int W, SyncMode sync) {
    buckets.resize(2);
    buckets[0].tokens = 1000, buckets[1].tokens = 30;
    pr.buckets = &buckets;
    pr.world_size = W;
    pr.layout.sync = sync;
  }
};

MicroBatch mb(uint32_t begin, uint32_t count, uint16_t bucket, uint8_t padded = 0) {
  MicroBatch m;
  m.begin = begin, m.count = count, m.bucket = bucket, m.padded = padded;
  return m;
}

TEST(PlanWriter, EmptyPlanCarriesNameWorldAndSync) {
  Problem p(4, SyncMode::kMicro);
  const Plan e = empty_plan(p.pr, "fixed");
  EXPECT_EQ(e.strategy, "fixed");
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.sync, SyncMode::kMicro);
  EXPECT_EQ(e.num_steps(), 0u);
  PlanWriter w(p.pr, "fixed", false);
  EXPECT_EQ(w.finish().num_steps(), 0u);
}

TEST(PlanWriter, RankStepsInStepMajorOrderWithTotals) {
  Problem p(2, SyncMode::kStep);
  const std::vector<uint32_t> ids = {10, 11, 12, 13, 14, 15};
  PlanWriter w(p.pr, "x", false);
  w.reserve(7, 4, 2);
  // Step 0: rank 0 two clips, rank 1 three images; step 1: rank 0 one clip, rank 1 a padded image.
  w.add(mb(w.append_ids(ids.data(), 2), 2, 0));
  w.next_rank();
  w.add(mb(w.append_ids(ids.data() + 2, 3), 3, 1));
  w.next_rank();
  w.add(mb(w.append_ids(ids.data() + 5, 1), 1, 0));
  w.next_rank();
  w.add(mb(w.append_ids(ids.data() + 2, 1), 1, 1, 1));
  w.next_rank();
  const Plan plan = w.finish();
  EXPECT_EQ(plan.sample_ids, (std::vector<uint32_t>{10, 11, 12, 13, 14, 15, 12}));
  EXPECT_EQ(plan.rank_begin, (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  ASSERT_EQ(plan.num_steps(), 2u);
  EXPECT_EQ(plan.steps[0].samples, 5u);
  EXPECT_EQ(plan.steps[0].tokens, 2u * 1000 + 3u * 30);
  EXPECT_EQ(plan.steps[0].padded, 0u);
  EXPECT_EQ(plan.steps[1].samples, 1u);
  EXPECT_EQ(plan.steps[1].tokens, 1000u);
  EXPECT_EQ(plan.steps[1].padded, 1u);
  EXPECT_EQ(plan.padded_samples, 1);
  EXPECT_TRUE(plan.mb_group.empty());
  EXPECT_EQ(plan.micro_batches[1].begin, 2u);
}

TEST(PlanWriter, AGroupsMicroBatchIsListedOnEachRankAndCountedOnce) {
  Problem p(4, SyncMode::kStep);
  const std::vector<uint32_t> ids = {1, 2, 3, 4};
  PlanWriter w(p.pr, "balanced", true);
  // One step: a clip of 2 samples on ranks 0-1 (a group of 2), an image on rank 2, a padded
  // image on rank 3.
  const uint32_t at = w.append_ids(ids.data(), 2);
  for (int r = 0; r < 2; ++r) {
    w.add(mb(at, 2, 0), 2);
    w.next_rank();
  }
  w.add(mb(w.append_ids(ids.data() + 2, 1), 1, 1), 1);
  w.next_rank();
  w.add(mb(w.append_ids(ids.data() + 3, 1), 1, 1, 1), 1);
  w.next_rank();
  const Plan plan = w.finish();
  EXPECT_EQ(plan.sample_ids, ids);
  EXPECT_EQ(plan.mb_group, (std::vector<uint8_t>{2, 2, 1, 1}));
  ASSERT_EQ(plan.num_steps(), 1u);
  EXPECT_EQ(plan.steps[0].samples, 3u);
  EXPECT_EQ(plan.steps[0].tokens, 2u * 1000 + 30u);
  EXPECT_EQ(plan.steps[0].padded, 1u);
  EXPECT_EQ(plan.padded_samples, 1);
  // total_steps is what finish() ran: the same totals from the finished micro-batches.
  Plan again = plan;
  again.steps.clear(), again.padded_samples = 0;
  total_steps(p.pr, again);
  EXPECT_EQ(again.steps[0].samples, 3u);
  EXPECT_EQ(again.steps[0].tokens, plan.steps[0].tokens);
  EXPECT_EQ(again.padded_samples, 1);
}

TEST(PlanWriter, RefusesMoreThanTwoToTheThirtyTwoSampleSlots) {
  Problem p(1, SyncMode::kStep);
  PlanWriter w(p.pr, "x", false);
  EXPECT_THROW(w.reserve(uint64_t(1) << 32, 1, 1), std::length_error);
  const uint32_t id = 0;
  EXPECT_THROW(w.append_ids(&id, uint64_t(1) << 33),
               std::length_error);  // checked before any id is read
}

}  // namespace
}  // namespace adaptiveload
