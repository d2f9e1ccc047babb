// balanced's two shared stages (strategy/balanced.h) on a hand-made problem, as both of its
// paths call them: step sync's dealing (deal_steps) without and with start loads (the wide
// micro-batches of sequence-parallel groups placed first), and micro sync's cut
// (cut_for_slots) of the whole pool or of what is left of it; and balanced on groups, which
// calls them for its one-GPU samples. No data files, no Planner.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "adaptiveload/strategy/balanced/balanced.h"
#include "adaptiveload/strategy/balanced/step_layout.h"
#include "adaptiveload/strategy/stages.h"
#include "token_cost.h"

namespace adaptiveload {
namespace {

// Bucket 0: 6 long clips (300,000 tokens, 2 to a micro-batch); bucket 1: 20 short clips
// (30,000, up to 8); bucket 2: 60 images (1,000, up to 64). Sample ids are 100 * bucket + i.
struct Problem {
  std::vector<Bucket> buckets;
  test::TokenCost cost{20e-6};  // 20 us of overhead per micro-batch
  PlanProblem pr;
  BucketedPool pool;
  Problem() {
    buckets.resize(3);
    buckets[0].tokens = 300000, buckets[0].frames = 81;
    buckets[1].tokens = 30000, buckets[1].frames = 17;
    buckets[2].tokens = 1000, buckets[2].frames = 1;
    pr.buckets = &buckets;
    pr.cost = &cost;
    pr.world_size = 4;
    pr.max_batch_memory = {2, 8, 64};
    const uint64_t n[3] = {6, 20, 60};
    pool.begin = {0};
    for (uint64_t b = 0; b < 3; ++b) {
      for (uint64_t i = 0; i < n[b]; ++i) pool.ids.push_back(uint32_t(100 * b + i));
      pool.begin.push_back(pool.ids.size());
    }
  }
  std::vector<uint64_t> starts() const {
    return std::vector<uint64_t>(pool.begin.begin(), pool.begin.end() - 1);
  }
};

uint32_t total(const std::vector<uint32_t>& v) { return std::accumulate(v.begin(), v.end(), 0u); }

TEST(DealInputs, PricesEveryBucketAndOrdersTheTakenLongestFirst) {
  Problem p;
  const DealInputs all = deal_inputs(p.pr, p.pool, {});
  EXPECT_EQ(all.order, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(all.per, (std::vector<int64_t>{300000, 30000, 1000}));
  EXPECT_EQ(all.mem_cap, (std::vector<int64_t>{2, 8, 64}));
  EXPECT_EQ(all.image, (std::vector<uint8_t>{0, 0, 1}));
  // The images need 20 of them to cover a micro-batch's 20 us.
  EXPECT_EQ(all.min_new[2], 20);
  // Only the buckets taken (the one-GPU ones beside wide groups), still priced all.
  const DealInputs ones = deal_inputs(p.pr, p.pool, {0, 1, 1});
  EXPECT_EQ(ones.order, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(ones.per.size(), 3u);
}

TEST(DealSteps, DealsEverySampleOnceAndLaysTheBinsOutAsSteps) {
  Problem p;
  const uint64_t K = 3, W = 4;
  const StepDeal d = deal_steps(BalancedProblem(p.pr), deal_inputs(p.pr, p.pool, {}), K, 0, {});
  ASSERT_EQ(d.perm.size(), K * W);
  std::vector<uint32_t> sorted(d.perm);
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t j = 0; j < K * W; ++j) EXPECT_EQ(sorted[j], j);
  EXPECT_EQ(total(d.counts.samples), 86u);
  EXPECT_EQ(std::count(d.counts.samples.begin(), d.counts.samples.end(), 0u),
            0);  // no rank-step idle
  EXPECT_EQ(d.ticks, epoch_ticks(d.counts, d.perm, int(W), 0));
}

TEST(DealSteps, StartLoadsKeepEachBinInItsStepAndFillAroundThem) {
  // Three steps of 4 ranks; ranks 0-1 of step 0 start with a wide micro-batch of 2 ms (as a
  // group of 2 would leave them): the one-GPU work fills the other ranks of step 0 up to it
  // first, and no bin moves to another step.
  Problem p;
  const uint64_t K = 3, W = 4;
  DealInputs in = deal_inputs(p.pr, p.pool, {0, 1, 1});
  DealInputs::StartLoads start;
  start.load.assign(K * W, 0);
  start.offset.assign(K * W, 0);
  in.start = &start;
  for (uint64_t r = 0; r < 2; ++r) start.load[r * K + 0] = 2'000'000;
  // Step 0's level is 2 ms: every bin of it waits below that level.
  for (uint64_t r = 0; r < W; ++r) start.offset[r * K + 0] = 2'000'000;
  const StepDeal d = deal_steps(BalancedProblem(p.pr), in, K, 0, {});
  for (uint64_t t = 0; t < K; ++t)
    for (uint64_t r = 0; r < W; ++r) EXPECT_EQ(d.perm[t * W + r], r * K + t);
  EXPECT_EQ(total(d.counts.samples), 80u);  // the long clips are not taken
  for (uint64_t r = 0; r < 2; ++r) EXPECT_GE(d.counts.load[r * K], 2'000'000);
  // The free ranks of step 0 carry more than the ranks of the other steps: they fill up to
  // the level the wide work set.
  for (uint64_t r = 2; r < W; ++r)
    for (uint64_t t = 1; t < K; ++t) EXPECT_GT(d.counts.load[r * K], d.counts.load[r * K + t]);
  EXPECT_EQ(d.ticks, epoch_ticks(d.counts, d.perm, int(W), 0));
  // An extra candidate is dealt as given and kept where it is the fastest: one piece of every
  // short clip and image on bin 0 is never faster, so the deal above is kept.
  DealInputs lump = in;
  lump.pieces = {{20 * 30000 + 20000, 20, 1}, {60 * 1000 + 20000, 60, 2}};
  std::vector<DealInputs> extra;
  extra.push_back(lump);
  const StepDeal e = deal_steps(BalancedProblem(p.pr), in, K, 0, std::move(extra));
  EXPECT_TRUE(e.inputs.pieces.empty());
  EXPECT_EQ(e.ticks, d.ticks);
}

TEST(DealSteps, AGivenCandidateThatIsFastestIsKept) {
  // One step of four bins; the caller's pieces (its own micro-batches, at its own price: 1 us
  // for five short clips, far below the cost model's 170 us) deal as given and, being the
  // fastest, are kept.
  Problem p;
  DealInputs in = deal_inputs(p.pr, p.pool, {0, 1, 0});
  DealInputs::StartLoads start;
  start.load = std::vector<int64_t>(4, 0);
  start.offset = std::vector<int64_t>(4, 0);
  in.start = &start;
  DealInputs cheap = in;
  for (int k = 0; k < 4; ++k) cheap.pieces.push_back({1000, 5, 1});
  std::vector<DealInputs> extra;
  extra.push_back(cheap);
  const StepDeal d = deal_steps(BalancedProblem(p.pr), in, 1, 0, std::move(extra));
  EXPECT_EQ(d.inputs.pieces.size(), 4u);
  EXPECT_EQ(d.ticks, 1000);
  for (uint64_t j = 0; j < 4; ++j) EXPECT_EQ(d.counts.samples[j], 5u);
  // Without it, balanced's own dealing: the same samples, at the cost model's price.
  const StepDeal own = deal_steps(BalancedProblem(p.pr), in, 1, 0, {});
  EXPECT_TRUE(own.inputs.pieces.empty());
  EXPECT_EQ(own.ticks, 5 * 30000 + 20000);
}

TEST(CutForSlots, CutsWhatIsLeftLongestFirstInAMultipleOfW) {
  Problem p;
  // Two long clips and 8 short clips already placed: the cut starts past them.
  std::vector<uint64_t> from = p.starts();
  from[0] += 2, from[1] += 8;
  const MicroCut cut = cut_for_slots(p.pr, p.pool, from, 0, {});
  EXPECT_EQ(cut.items.size() % 4, 0u);
  EXPECT_EQ(cut.missing, 0u);
  std::vector<uint64_t> next(from);
  int64_t last = INT64_MAX;
  for (const SlotItem& x : cut.items) {
    ASSERT_LT(x.bucket, 3);
    EXPECT_LE(int64_t(x.count), p.pr.max_batch_memory[x.bucket]);
    const int64_t cost = 20000 + int64_t(x.count) * int64_t(p.buckets[x.bucket].tokens);
    EXPECT_LE(cost, last);  // longest first
    last = cost;
    EXPECT_GE(x.begin, from[x.bucket]);
    next[x.bucket] += x.count;
  }
  // Every sample left once, none of those placed before.
  for (size_t b = 0; b < 3; ++b) EXPECT_EQ(next[b], p.pool.begin[b + 1]) << "bucket " << b;
  EXPECT_EQ(cut.least[0], 20000 + 300000);
}

TEST(CutForSlots, MoreSlotsForATarget) {
  Problem p;
  const MicroCut free = cut_for_slots(p.pr, p.pool, p.starts(), 0, {});
  const uint64_t slots = free.items.size() / 4;
  // A target of more slots than the fastest cut has: smaller micro-batches until it is met.
  const MicroCut held = cut_for_slots(p.pr, p.pool, p.starts(), slots + 6, {});
  EXPECT_GE(held.items.size() / 4, slots + 6);
  // With the caller's sizes among the candidates, still every sample once.
  const MicroCut given = cut_for_slots(p.pr, p.pool, p.starts(), slots + 6, {{1, 3, 10}});
  uint64_t n = 0;
  for (const SlotItem& x : given.items) n += x.count;
  EXPECT_EQ(n, 86u);
  EXPECT_GE(given.items.size() / 4, slots + 6);
}

TEST(CutForSlots, TheCallersSizesJoinTheSearch) {
  // The short clips' cap is 1 here (memory): balanced's own candidates cut them one to a
  // micro-batch, 20 overheads. The caller's sizes (5 to a micro-batch, as a group path may
  // cut them to its own memory figure) pay 4 and fill one slot of 4: they rank first.
  Problem p;
  p.pr.max_batch_memory = {2, 1, 64};
  std::vector<uint64_t> from = p.starts();
  from[0] = p.pool.begin[1], from[2] = p.pool.begin[3];  // only the short clips are left
  const MicroCut own = cut_for_slots(p.pr, p.pool, from, 0, {});
  for (const SlotItem& x : own.items) EXPECT_EQ(x.count, 1u);
  const MicroCut given = cut_for_slots(p.pr, p.pool, from, 0, {{1, 5, 1}});
  ASSERT_EQ(given.items.size(), 4u);
  for (const SlotItem& x : given.items) EXPECT_EQ(x.count, 5u);
}

TEST(CutForSlots, NothingLeftIsNothingToCut) {
  Problem p;
  std::vector<uint64_t> from(p.pool.begin.begin() + 1, p.pool.begin.end());
  const MicroCut cut = cut_for_slots(p.pr, p.pool, from, 5, {});
  EXPECT_TRUE(cut.items.empty());
  EXPECT_EQ(cut.missing, 0u);
}

// balanced on sequence-parallel groups in step sync (plan_balanced_groups) on a hand-made
// problem with K != W: three long clips on groups of 2 (one a step, 300 us a rank) and 60
// short clips (30 us) on one GPU. The one-GPU work must land on the ranks each step's group
// leaves free, so every step's ranks end within a short micro-batch of each other.
TEST(BalancedGroups, OneGpuWorkFillsTheRanksEachStepsGroupLeaves) {
  std::vector<Bucket> buckets(2);
  buckets[0].tokens = 600000, buckets[0].frames = 121;
  buckets[1].tokens = 30000, buckets[1].frames = 17;
  test::TokenCost cost(20e-6);
  PlanProblem pr;
  pr.buckets = &buckets;
  pr.cost = &cost;
  pr.world_size = 4;
  pr.max_batch_memory = {1, 64};
  pr.layout.sp.sizes = 1u | 2u;
  std::vector<uint16_t> sample_bucket;
  for (uint32_t i = 0; i < 63; ++i) sample_bucket.push_back(i < 3 ? 0 : 1), pr.pool.push_back(i);
  pr.sample_bucket = &sample_bucket;
  pr.bucket_group = {2, 1};
  pr.batch_kind = BatchKind::kSamples;
  pr.batch_target = 21;  // 3 steps
  const Plan plan = plan_balanced_groups(BalancedProblem(pr));
  ASSERT_EQ(plan.num_steps(), 3u);
  std::vector<uint32_t> seen;
  for (size_t t = 0; t < 3; ++t) {
    Ticks lo = kMaxTicks, hi = 0;
    int wide = 0;
    for (int r = 0; r < 4; ++r) {
      const auto [b, e] = plan.rank_range(t, r);
      Ticks load = 0;
      for (uint64_t m = b; m < e; ++m) {
        const MicroBatch& mb = plan.micro_batches[m];
        const int g = plan.mb_group[m];
        load += group_ticks(pr, MicroShape::uniform(mb.count, buckets[mb.bucket]), g);
        wide += g > 1;
        if (r % g == 0)
          for (uint32_t k = 0; k < mb.count; ++k) seen.push_back(plan.sample_ids[mb.begin + k]);
      }
      lo = std::min(lo, load), hi = std::max(hi, load);
    }
    EXPECT_EQ(wide, 2) << "step " << t;  // one long clip, on both ranks of its group
    EXPECT_LE(hi - lo, 2 * 30000 + 20000) << "step " << t;
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, pr.pool);  // every sample once
}

}  // namespace
}  // namespace adaptiveload
