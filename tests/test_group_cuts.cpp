// Cutting buckets into micro-batches on sequence-parallel groups (strategy/group_cuts.h) on a
// hand-made problem: even cuts within the cap, halves that keep their samples, the largest
// batch within a time, the padded repeat of the smallest group, and the plan written with a
// group's micro-batch on each of its ranks. No data files.
#include <gtest/gtest.h>

#include "adaptiveload/strategy/balanced/group_cuts.h"
#include "adaptiveload/util/error.h"
#include "token_cost.h"

namespace adaptiveload {
namespace {

struct Problem {
  std::vector<Bucket> buckets;
  test::TokenCost cost{1e-3};  // 1 ms of overhead per micro-batch
  PlanProblem pr;
  BucketedPool pool;
  Problem() {
    buckets.resize(3);
    buckets[0].tokens = 200000;  // a long clip, on 2 ranks
    buckets[1].tokens = 30000;
    buckets[2].tokens = 1000;
    pr.buckets = &buckets;
    pr.cost = &cost;
    pr.world_size = 4;
    pr.max_batch_memory = {1, 5, 64};
    pr.bucket_group = {2, 1, 1};
    pr.layout.sp.sizes = 1u | 2u;
    pool.ids = {0, 1, 10, 11, 12, 13, 14, 15, 16, 20, 21, 22};
    pool.begin = {0, 2, 9, 12};
  }
};

TEST(GroupCuts, BucketCostsOnTheirGroups) {
  Problem p;
  const GroupBuckets c = group_bucket_costs(p.pr);
  EXPECT_EQ(c.g, (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(c.cap, (std::vector<int64_t>{1, 5, 64}));
  // Ticks (ns): 30 us a sample, 1 ms fixed.
  EXPECT_EQ(c.per[1], 30000);
  EXPECT_EQ(c.fixed[1], 1000000);
  EXPECT_LT(c.per[0], 200000);  // split over 2 ranks (no all-to-all cost here)
}

TEST(GroupCuts, CutsEvenlyWithinTheCap) {
  Problem p;
  const GroupBuckets c = group_bucket_costs(p.pr);
  std::vector<GroupItem> items;
  cut_bucket(items, c, p.pr, 1, p.pool.begin[1], p.pool.begin[2],
             3);  // 7 samples, at most 3: 3, 2, 2
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].count, 3u);
  EXPECT_EQ(items[1].count, 2u);
  EXPECT_EQ(items[2].count, 2u);
  EXPECT_EQ(items[1].begin, 5u);
  EXPECT_EQ(items[2].begin + items[2].count, 9u);
  EXPECT_EQ(items[0].cost,
            to_ticks(group_microbatch_time(p.cost, 3, p.buckets[1], 1, p.pr.layout.sp)));
  cut_bucket(items, c, p.pr, 0, 0, 2, 100);  // the cap (1) wins
  ASSERT_EQ(items.size(), 5u);
  EXPECT_EQ(items[3].count, 1u);
  EXPECT_EQ(items[4].group, 2);
  cut_bucket(items, c, p.pr, 2, 9, 9, 4);  // nothing to cut
  EXPECT_EQ(items.size(), 5u);
}

TEST(GroupCuts, SplitHalfKeepsEverySample) {
  Problem p;
  GroupItem it;
  it.begin = 2, it.count = it.own = 5, it.bucket = 1;
  const GroupItem moved = split_half(it, p.pr);
  EXPECT_EQ(it.count, 3u);
  EXPECT_EQ(it.own, 3u);
  EXPECT_EQ(moved.begin, 5u);
  EXPECT_EQ(moved.count, 2u);
  EXPECT_LT(moved.cost, it.cost);
}

TEST(GroupCuts, BatchForATime) {
  Problem p;
  const GroupBuckets c = group_bucket_costs(p.pr);
  EXPECT_EQ(batch_for(c, 1, 1000000 + 35 * 3000), 3);  // 3.5 samples' ticks above the fixed cost
  EXPECT_EQ(batch_for(c, 1, 1000000 + 3 * 30000), 3);  // exactly 3 fit
  EXPECT_EQ(batch_for(c, 1, 1000000 + 3 * 30000 - 1), 2);
  EXPECT_EQ(batch_for(c, 1, 1000000000), 5);  // the cap
  EXPECT_EQ(batch_for(c, 1, kMaxTicks), 5);
  EXPECT_EQ(batch_for(c, 1, 0), 1);  // at least one
}

TEST(GroupCuts, PaddingTakesTheSmallestGroupThatFits) {
  Problem p;
  const GroupBuckets c = group_bucket_costs(p.pr);
  const GroupItem pad = group_padding(p.pr, p.pool, c, 2);
  EXPECT_EQ(pad.group, 1);
  EXPECT_EQ(pad.bucket, 2);  // the cheapest of group 1
  EXPECT_EQ(pad.padded, 1);
  EXPECT_EQ(pad.count, 1u);
  EXPECT_EQ(pad.begin, 9u);
  BucketedPool only_long = p.pool;
  only_long.begin = {0, 2, 2, 2};
  EXPECT_EQ(group_padding(p.pr, only_long, c, 2).group, 2);
  EXPECT_THROW(group_padding(p.pr, only_long, c, 1), ConfigError);
}

TEST(GroupCuts, WritesAGroupsMicroBatchOnEachOfItsRanks) {
  Problem p;
  const GroupBuckets c = group_bucket_costs(p.pr);
  std::vector<GroupItem> items;
  cut_bucket(items, c, p.pr, 0, 0, 1, 1);   // item 0: a long clip on ranks 0-1
  cut_bucket(items, c, p.pr, 1, 2, 4, 2);   // item 1: two clips on rank 2
  cut_bucket(items, c, p.pr, 2, 9, 12, 3);  // item 2: three images on rank 3
  const std::vector<uint64_t> begin = {0, 1, 2, 3, 4};
  const std::vector<uint32_t> lists = {0, 0, 1, 2};
  const Plan plan = write_group_plan(p.pr, p.pool, items, begin, lists, 1);
  EXPECT_EQ(plan.sample_ids, (std::vector<uint32_t>{0, 10, 11, 20, 21, 22}));
  EXPECT_EQ(plan.mb_group, (std::vector<uint8_t>{2, 2, 1, 1}));
  ASSERT_EQ(plan.num_steps(), 1u);
  EXPECT_EQ(plan.steps[0].samples, 6u);
  EXPECT_EQ(plan.steps[0].tokens, 200000u + 2 * 30000u + 3 * 1000u);
  EXPECT_EQ(plan.micro_batches[0].begin, plan.micro_batches[1].begin);
}

}  // namespace
}  // namespace adaptiveload
