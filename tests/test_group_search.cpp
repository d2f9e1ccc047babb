// balanced beside sequence parallelism (strategy/group_search.h) on hand-made problems and a
// stand-in strategy: one group size for all as W / g ranks, the plan listed on every rank of a
// group, what does not fit refused, and the held invariants kept without asking for the other
// strategies where no global batch is set. No data files, no Planner.
#include <gtest/gtest.h>

#include "adaptiveload/strategy/balanced/group_choice.h"
#include "adaptiveload/strategy/group_search.h"
#include "adaptiveload/strategy/plan_writer.h"
#include "adaptiveload/util/error.h"
#include "token_cost.h"

namespace adaptiveload {
namespace {

using test::TokenCost;  // one microsecond per thousand tokens, no overhead

struct Problem {
  std::vector<Bucket> buckets;
  std::vector<uint16_t> sample_bucket;
  TokenCost cost;
  PlanProblem pr;
  GroupSearch gs;
  explicit Problem(int W) {
    buckets.resize(2);
    buckets[0].frames = 81, buckets[0].tokens = 64000;
    buckets[1].frames = 1, buckets[1].tokens = 1000;
    sample_bucket = {0, 0, 1, 1, 1, 1};
    pr.buckets = &buckets;
    pr.sample_bucket = &sample_bucket;
    pr.pool = {0, 1, 2, 3, 4, 5};
    pr.cost = &cost;
    pr.world_size = W;
    pr.max_batch_memory = {1, 8};
    pr.mem_budget_tokens = 70000;
    pr.comp_budget = 5;
    gs.buckets = &buckets;
    gs.sp.sizes = 1u | 2u;  // groups of 1 and 2
    gs.max_batch_on = [](size_t b, int g) {
      return int64_t(b == 0 ? 2 * g - 2 : 8 * g);
    };  // bucket 0 needs g = 2
  }
};

TEST(AsGroups, OneIsTheProblemItself) {
  Problem p(4);
  p.pr.bucket_group = {2, 1};
  const PlanProblem q = as_groups(p.gs, p.pr, 1, nullptr);
  EXPECT_TRUE(q.bucket_group.empty());
  EXPECT_EQ(q.world_size, 4);
  EXPECT_EQ(q.max_batch_memory, p.pr.max_batch_memory);
  EXPECT_EQ(q.cost, p.pr.cost);
}

TEST(AsGroups, GroupsOfTwoAreRanksWithTwiceTheMemory) {
  Problem p(4);
  TokenCost on_two;
  const PlanProblem q = as_groups(p.gs, p.pr, 2, &on_two);
  EXPECT_EQ(q.world_size, 2);
  EXPECT_EQ(q.cost, &on_two);
  EXPECT_EQ(q.max_batch_memory, (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(q.mem_budget_tokens, 140000);
  EXPECT_DOUBLE_EQ(q.comp_budget, 10);
  // A size the layout does not allow fits nothing.
  EXPECT_EQ(as_groups(p.gs, p.pr, 4, &on_two).max_batch_memory, (std::vector<int64_t>{0, 0}));
}

// A stand-in strategy: every sample of the pool in its own micro-batch, one per rank-step,
// as many steps as it takes.
Plan one_each(const PlanProblem& pr) {
  PlanWriter w(pr, "one_each", false);
  const std::vector<uint32_t>& ids = pr.pool_ids();
  const size_t W = size_t(pr.world_size), steps = (ids.size() + W - 1) / W;
  for (size_t i = 0; i < steps * W; ++i) {
    if (i < ids.size()) {
      MicroBatch mb;
      mb.begin = w.append_ids(&ids[i], 1), mb.count = 1, mb.bucket = (*pr.sample_bucket)[ids[i]];
      w.add(mb);
    }
    w.next_rank();
  }
  return w.finish();
}

TEST(RunOnGroups, EachGroupsRanksListTheSameMicroBatches) {
  Problem p(4);
  const StrategyEntry s{"one_each", "", &one_each};
  const Plan plan = run_on_groups(p.gs, s, p.pr, 2);
  EXPECT_EQ(plan.world_size, 4);
  ASSERT_EQ(plan.num_steps(), 3u);  // 6 samples on 2 groups
  ASSERT_EQ(plan.mb_group.size(), plan.micro_batches.size());
  for (uint8_t g : plan.mb_group) EXPECT_EQ(g, 2);
  for (size_t t = 0; t < plan.num_steps(); ++t) {
    EXPECT_EQ(plan.steps[t].samples, 2u);
    for (int r = 0; r < 4; r += 2) {
      const auto [b0, e0] = plan.rank_range(t, r);
      const auto [b1, e1] = plan.rank_range(t, r + 1);
      ASSERT_EQ(e0 - b0, 1u);
      ASSERT_EQ(e1 - b1, 1u);
      EXPECT_EQ(plan.micro_batches[b0].begin, plan.micro_batches[b1].begin);
    }
  }
  EXPECT_EQ(plan.sample_ids.size(), 6u);  // written once per group, not per rank
}

TEST(RunOnGroups, RefusesABucketThatDoesNotFitTheGroup) {
  Problem p(4);
  p.gs.max_batch_on = [](size_t b, int) { return int64_t(b == 0 ? 0 : 8); };
  const StrategyEntry s{"one_each", "", &one_each};
  EXPECT_THROW(run_on_groups(p.gs, s, p.pr, 2), ConfigError);
  p.sample_bucket = {1, 1, 1, 1, 1, 1};  // no sample of bucket 0 left: it plans
  EXPECT_EQ(run_on_groups(p.gs, s, p.pr, 2).world_size, 4);
}

TEST(RunBalancedHeld, AFreeGlobalBatchKeepsTheHeldPlanWithoutAskingTheOthers) {
  Problem p(2);
  p.pr.batch_kind = BatchKind::kFree;
  const StrategyEntry s{"one_each", "", &one_each};
  bool asked = false;
  const Plan plan = run_balanced_held(
      p.gs, [&](const BalancedProblem& q) { return s.fn(q); }, BalancedProblem(p.pr),
      [&] {
        asked = true;
        return 0.0;
      });
  EXPECT_FALSE(asked);
  EXPECT_EQ(plan.num_steps(), 3u);
}

}  // namespace
}  // namespace adaptiveload
