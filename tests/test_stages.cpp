// The strategies' shared stages (strategy/stages.h) on small hand-made inputs: the tick
// conversion at its edges, the generator of a purpose, a micro-batch's weight in the global
// batch, slot keys, the end-of-epoch padding, the split to a multiple of W and the shrink to
// the step count. No data files, no Planner.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

#include "adaptiveload/strategy/stages.h"

namespace adaptiveload {
namespace {

// Three buckets: an image (1,560 tokens), a clip (32,760) and an empty one.
struct Small {
  std::vector<Bucket> buckets;
  PlanProblem pr;
  Small() {
    buckets.resize(3);
    buckets[0].frames = 1, buckets[0].tokens = 1560;
    buckets[1].frames = 81, buckets[1].tokens = 32760;
    buckets[2].frames = 33, buckets[2].tokens = 14040;
    pr.buckets = &buckets;
    pr.seed = 11, pr.epoch = 2;
  }
};

TEST(Ticks, RoundsToNearestNanosecond) {
  EXPECT_EQ(to_ticks(1.0), 1'000'000'000);
  EXPECT_EQ(to_ticks(0.25e-6), 250);
  EXPECT_EQ(to_ticks(2.4e-9), 2);
  EXPECT_EQ(to_ticks(2.6e-9), 3);
  EXPECT_EQ(to_ticks(1e9),
            1'000'000'000'000'000'000);  // the largest time the planner allows one sample
}

TEST(Ticks, NeverLessThanOne) {
  EXPECT_EQ(to_ticks(0.0), 1);
  EXPECT_EQ(to_ticks(0.4e-9), 1);
  EXPECT_EQ(to_ticks(-3.0), 1);
  EXPECT_EQ(to_ticks(-std::numeric_limits<double>::infinity()), 1);
}

TEST(Ticks, SaturatesAtTwoToTheSixty) {
  EXPECT_EQ(kMaxTicks, Ticks(1) << 60);
  EXPECT_EQ(to_ticks(1e12), kMaxTicks);
  EXPECT_EQ(to_ticks(std::ldexp(1.0, 60) * 1e-9), kMaxTicks);
  EXPECT_LT(to_ticks(std::ldexp(1.0, 59) * 1e-9), kMaxTicks);
  EXPECT_EQ(to_ticks(std::numeric_limits<double>::infinity()), kMaxTicks);
  EXPECT_EQ(to_ticks(std::numeric_limits<double>::quiet_NaN()), kMaxTicks);
  // Seven saturated loads still sum within int64.
  EXPECT_LE(kMaxTicks, std::numeric_limits<Ticks>::max() / 7);
}

TEST(ProblemRng, SegmentZeroIsTheEpochsOwnStream) {
  Small s;
  Rng a = problem_rng(s.pr, kPurposeStepOrder);
  Rng b = Rng::for_purpose(11, 2, kPurposeStepOrder);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
}

TEST(ProblemRng, SegmentsAndPurposesAreIndependentStreams) {
  Small s;
  s.pr.segment = 3;
  Rng a = problem_rng(s.pr, kPurposeStepOrder);
  Rng b = Rng::for_purpose(11, 2, kPurposeStepOrder | (uint64_t(3) << 8));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
  Rng c = problem_rng(s.pr, kPurposeStepOrder), d = problem_rng(s.pr, kPurposeSlotRanks);
  s.pr.segment = 0;
  Rng e = problem_rng(s.pr, kPurposeStepOrder);
  int same_d = 0, same_e = 0;
  for (int i = 0; i < 8; ++i) {
    const uint32_t x = c.next_u32();
    same_d += x == d.next_u32(), same_e += x == e.next_u32();
  }
  EXPECT_LT(same_d, 2);
  EXPECT_LT(same_e, 2);
}

TEST(BatchWeight, SamplesOrTokens) {
  Small s;
  s.pr.batch_kind = BatchKind::kSamples;
  EXPECT_EQ(batch_weight(s.pr, 1, 3), 3u);
  s.pr.batch_kind = BatchKind::kFree;
  EXPECT_EQ(batch_weight(s.pr, 1, 3), 3u);
  s.pr.batch_kind = BatchKind::kTokens;
  EXPECT_EQ(batch_weight(s.pr, 1, 3), 3u * 32760u);
  EXPECT_EQ(batch_weight(s.pr, 0, 7), 7u * 1560u);
}

TEST(SlotKeys, SumEachSlotOfW) {
  Small s;
  // W = 2: slots {4 images, 1 clip}, {2 clips, 1 padded image}; a partial slot is not keyed.
  const std::vector<SlotItem> items = {
      {0, 4, 0, 0}, {0, 1, 1, 0}, {1, 2, 1, 0}, {0, 1, 0, 1}, {5, 1, 0, 0}};
  s.pr.batch_kind = BatchKind::kSamples;
  EXPECT_EQ(slot_keys(s.pr, items, 2), (std::vector<uint64_t>{5, 3}));
  s.pr.batch_kind = BatchKind::kTokens;
  EXPECT_EQ(slot_keys(s.pr, items, 2), (std::vector<uint64_t>{4 * 1560 + 32760, 2 * 32760 + 1560}));
  EXPECT_TRUE(slot_keys(s.pr, {}, 3).empty());
}

TEST(Padding, RepeatsTheBucketsFirstSample) {
  BucketedPool pool;
  pool.ids = {7, 3, 9, 4};
  pool.begin = {0, 3, 3, 4};
  const SlotItem a = padded_repeat(pool, 0), b = padded_repeat(pool, 2);
  EXPECT_EQ(a.begin, 0u);
  EXPECT_EQ(b.begin, 3u);
  EXPECT_EQ(pool.ids[b.begin], 4u);
  for (const SlotItem& x : {a, b}) {
    EXPECT_EQ(x.count, 1u);
    EXPECT_EQ(x.padded, 1);
  }
  EXPECT_EQ(b.bucket, 2);
}

TEST(Padding, CheapestBucketSkipsEmptyOnesAndTiesToTheLast) {
  BucketedPool pool;
  pool.ids = {0, 1, 2, 3, 4};
  pool.begin = {0, 2, 2, 4, 5};                        // bucket 1 is empty
  EXPECT_EQ(cheapest_bucket(pool, {5, 1, 3, 4}), 2u);  // bucket 1 is cheaper but has no sample
  EXPECT_EQ(cheapest_bucket(pool, {3, 1, 3, 4}), 2u);  // a tie: the last
  EXPECT_EQ(cheapest_bucket(pool, {2, 1, 3, 2}), 3u);
  EXPECT_EQ(cheapest_bucket(pool, {1, 1, 3, 2}), 0u);
  BucketedPool empty;
  empty.begin = {0, 0, 0};
  EXPECT_THROW(cheapest_bucket(empty, {1, 1}), std::logic_error);
}

TEST(Padding, PaddingBucketByTheCallersOrderAmongAllowed) {
  BucketedPool pool;
  pool.ids = {0, 1, 2, 3, 4};
  pool.begin = {0, 2, 2, 4, 5};  // bucket 1 is empty
  const std::vector<int> group = {2, 1, 1, 4};
  const std::vector<double> cost = {0.5, 0.1, 0.7, 0.2};
  auto by_group_then_cost = [&](size_t a, size_t b) {
    return group[a] != group[b] ? group[a] < group[b] : cost[a] < cost[b];
  };
  auto fits = [&](int g) { return [&, g](size_t b) { return group[b] <= g; }; };
  // Block of 4: bucket 2 (group 1; bucket 1 has the same group but no sample).
  EXPECT_EQ(padding_bucket(pool, fits(4), by_group_then_cost), 2u);
  // Groups of 1 not allowed: of groups 2 and 4, the smaller.
  EXPECT_EQ(padding_bucket(
                pool, [&](size_t b) { return group[b] >= 2; }, by_group_then_cost),
            0u);
  // Neither precedes the other: the first in index order.
  EXPECT_EQ(padding_bucket(
                pool, [](size_t) { return true; }, [](size_t, size_t) { return false; }),
            0u);
  EXPECT_THROW(padding_bucket(
                   pool, [](size_t b) { return b == 1; }, by_group_then_cost),
               std::logic_error);
}

TEST(SplitToMultiple, SplitsUntilAMultipleOfW) {
  // 10 micro-batches on W = 4: two missing, split one at a time.
  int calls = 0;
  EXPECT_EQ(split_to_multiple(10, 4,
                              [&](uint64_t missing) -> uint64_t {
                                EXPECT_EQ(missing, uint64_t(2 - calls));
                                ++calls;
                                return 1;
                              }),
            0u);
  EXPECT_EQ(calls, 2);
  // A split may add several at once, at most the number missing.
  EXPECT_EQ(
      split_to_multiple(5, 4, [](uint64_t missing) { return std::min<uint64_t>(missing, 2); }), 0u);
  // Nothing splits: everything missing is left to pad or drop.
  EXPECT_EQ(split_to_multiple(9, 4, [](uint64_t) { return uint64_t(0); }), 3u);
  // One split, then none: the rest is left.
  int left = 1;
  EXPECT_EQ(split_to_multiple(1, 4, [&](uint64_t) { return uint64_t(left-- > 0 ? 1 : 0); }), 2u);
  // Already a multiple (and W = 1): split is never called.
  for (const auto& [count, W] : {std::pair<uint64_t, uint64_t>{8, 4}, {0, 4}, {7, 1}})
    EXPECT_EQ(split_to_multiple(count, W,
                                [](uint64_t) -> uint64_t {
                                  ADD_FAILURE();
                                  return 1;
                                }),
              0u);
  EXPECT_THROW(split_to_multiple(3, 4, [](uint64_t) { return uint64_t(2); }), std::logic_error);
}

TEST(ShrinkToSteps, ShrinksUntilTheStepCountIsMet) {
  // Each pass gains 3 steps: from 2 to 11 >= 10 in three passes.
  int passes = 0;
  EXPECT_EQ(shrink_to_steps(10, 2, 64,
                            [&](uint64_t have) -> std::optional<uint64_t> {
                              ++passes;
                              return have + 3;
                            }),
            11u);
  EXPECT_EQ(passes, 3);
  // At most max_passes.
  passes = 0;
  EXPECT_EQ(shrink_to_steps(100, 0, 8,
                            [&](uint64_t have) -> std::optional<uint64_t> {
                              ++passes;
                              return have + 1;
                            }),
            8u);
  EXPECT_EQ(passes, 8);
  // Nothing shrinks further: the count reached so far.
  EXPECT_EQ(shrink_to_steps(10, 4, 64,
                            [](uint64_t have) -> std::optional<uint64_t> {
                              if (have >= 6) return std::nullopt;
                              return have + 1;
                            }),
            6u);
  // Met already, or no target (0): shrink is never called.
  for (const auto& [target, have] : {std::pair<uint64_t, uint64_t>{5, 5}, {0, 0}, {3, 7}})
    EXPECT_EQ(shrink_to_steps(target, have, 64,
                              [](uint64_t) -> std::optional<uint64_t> {
                                ADD_FAILURE();
                                return std::nullopt;
                              }),
              have);
}

TEST(BucketGroups, GroupsOfOneAreNoGroups) {
  PlanProblem pr;
  set_bucket_groups(pr, {1, 2, 1});
  EXPECT_EQ(pr.bucket_group, (std::vector<uint8_t>{1, 2, 1}));
  EXPECT_EQ(pr.group(1), 2);
  set_bucket_groups(pr, {1, 1, 1});  // clears what was set
  EXPECT_TRUE(pr.bucket_group.empty());
  EXPECT_EQ(pr.group(1), 1);
  set_bucket_groups(pr, {});
  EXPECT_TRUE(pr.bucket_group.empty());
}

TEST(BucketGroups, LiveBucketsAndTheirGroupSpan) {
  const std::vector<uint16_t> sample_bucket = {2, 0, 2, 3, 0};
  const std::vector<uint8_t> live = live_buckets({0, 2, 4}, sample_bucket, 4);
  EXPECT_EQ(live, (std::vector<uint8_t>{1, 0, 1, 0}));
  EXPECT_EQ(live_buckets({}, sample_bucket, 4), (std::vector<uint8_t>(4, 0)));
  // Only live buckets count: bucket 1's group of 8 and bucket 3's of 1 do not.
  const GroupSpan s = group_span({2, 8, 4, 1}, live);
  EXPECT_EQ(s.min, 2);
  EXPECT_EQ(s.max, 4);
  const GroupSpan one = group_span({4, 8, 4, 1}, live);
  EXPECT_EQ(one.min, one.max);
  // None live: never one group size for all.
  const GroupSpan none = group_span({1, 1, 1, 1}, std::vector<uint8_t>(4, 0));
  EXPECT_GT(none.min, none.max);
}

}  // namespace
}  // namespace adaptiveload
