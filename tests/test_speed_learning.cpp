// Stragglers found online (docs/planner.md, "Stragglers found online"; issue 53 item 3): the
// estimator of rank speed factors (cost/speed_learning.h), the state that keeps them, and the
// re-plan of the rest of an epoch with them (Planner::resume's new_speeds).
#include <gtest/gtest.h>

#include <cmath>

#include "adaptiveload/cost/speed_learning.h"
#include "adaptiveload/plan/state.h"
#include "adaptiveload/util/error.h"
#include "planner_fixture.h"

using namespace adaptiveload;
using namespace adaptiveload::test;

namespace {

// `steps` rows of W ratios, 1 everywhere (times as the model predicts, scaled by `scale`),
// rank `slow` at 1 / speed from row `from` on.
std::vector<std::vector<double>> window(size_t steps, size_t W, size_t slow, double speed,
                                        size_t from = 0, double scale = 1.0) {
  std::vector<std::vector<double>> out(steps, std::vector<double>(W, scale));
  for (size_t t = from; t < steps; ++t) out[t][slow] = scale / speed;
  return out;
}

}  // namespace

TEST(SpeedLearning, FindsAStragglerAndGivesItsWorkBackWhenItRecovers) {
  const std::vector<double> ones(4, 1.0);
  // The model's scale cancels (a CPU runs far slower than the preset's GPU): only ratios count.
  const auto f = learn_rank_speeds(window(3, 4, 2, 0.7, 0, 250.0), ones);
  EXPECT_EQ(f, (std::vector<double>{1, 1, 0.7, 1}));
  // Two slow steps of three: the median is slow already.
  EXPECT_EQ(learn_rank_speeds(window(3, 4, 2, 0.7, 1), ones)[2], 0.7);
  // Recovered: the window is fast again and the factor is exactly 1.
  EXPECT_EQ(learn_rank_speeds(window(3, 4, 2, 1.0), f), ones);
  // Two ranks, the first slow: the lower median is the fast one.
  EXPECT_EQ(learn_rank_speeds(window(4, 2, 0, 0.5), {1, 1}), (std::vector<double>{0.5, 1}));
}

TEST(SpeedLearning, OneStepSpikeAndSmallNoiseChangeNothing) {
  const std::vector<double> ones(8, 1.0);
  auto w = window(5, 8, 3, 1.0);
  w[2][3] = 6.0;  // one slow step of one rank
  w[4][0] = 9.0;  // and another rank's
  EXPECT_EQ(learn_rank_speeds(w, ones), ones);
  // A whole step slow for every rank (a pause all share) is no rank's.
  for (double& v : w[1]) v = 3.0;
  EXPECT_EQ(learn_rank_speeds(w, ones), ones);
  // Within the tolerance (8%) of the factor in effect: kept (hysteresis), both ways.
  EXPECT_EQ(learn_rank_speeds(window(3, 8, 3, 0.95), ones), ones);
  const std::vector<double> slow{1, 1, 1, 0.7, 1, 1, 1, 1};
  EXPECT_EQ(learn_rank_speeds(window(3, 8, 3, 0.74), slow), slow);
  EXPECT_EQ(learn_rank_speeds(window(3, 8, 3, 0.6), slow)[3], 0.6);
  // A rank whose ratios scatter (median deviation 20% of their median) needs a change beyond that:
  // 0.8 (1 over the median of 1, 1.25, 1.75) stays 1; a steady 0.8 moves.
  auto noisy = window(3, 8, 3, 1.0);
  noisy[0][3] = 1.0, noisy[1][3] = 1.25, noisy[2][3] = 1.75;
  EXPECT_EQ(learn_rank_speeds(noisy, ones), ones);
  EXPECT_EQ(learn_rank_speeds(window(3, 8, 3, 0.8), ones)[3], 0.8);
  // Too few steps in the window: nothing moves.
  EXPECT_EQ(learn_rank_speeds(window(2, 8, 3, 0.5), ones), ones);
}

TEST(SpeedLearning, RanksWithoutWorkAndBadInput) {
  auto w = window(3, 3, 1, 0.5);
  w[0][2] = std::nan("");  // rank 2 had no work that step: its two others decide
  w[1][2] = 0;
  EXPECT_EQ(learn_rank_speeds(w, {1, 1, 1}), (std::vector<double>{1, 0.5, 1}));
  EXPECT_THROW(learn_rank_speeds({{1, 1}}, {1, 1, 1}), InputError);
  EXPECT_THROW(learn_rank_speeds({}, {1, 0}), InputError);
}

TEST(SpeedLearning, StateKeepsLearnedSpeedsAndReadsOldStates) {
  PlanState s;
  s.strategy = "balanced";
  s.segments = {{4, 3}, {4, 0}};
  const std::string plain = state_to_json(s);
  EXPECT_EQ(plain.find("speeds"), std::string::npos);  // as before when none is learned
  s.segment_speeds = {{}, {1, 1, 0.7, 1}};
  const PlanState back = state_from_json(state_to_json(s));
  EXPECT_EQ(back.segment_speeds, s.segment_speeds);
  EXPECT_EQ(state_to_json(back), state_to_json(s));
  std::string bad = state_to_json(s);
  bad.replace(bad.find("0.7"), 3, "-1.0");
  EXPECT_THROW(state_from_json(bad), InputError);
  s.segment_speeds = {{}, {1, 0.7}};  // two factors in a segment of four ranks
  EXPECT_THROW(state_from_json(state_to_json(s)), InputError);
  EXPECT_TRUE(canonical_speeds({1, 1, 1}).empty());
}

TEST(SpeedLearning, ResumeReplansTheRestWithTheLearnedSpeeds) {
  PlannerConfig c;
  c.world_size = 4;
  const Planner pl(real_manifest(), c);
  PlanState st = pl.initial_state("balanced", 4, 0);
  st.segments[0].second = 5;                              // five steps done
  const auto alike = pl.resume(st, 4, "", {1, 1, 1, 1});  // all 1: the configured speeds
  const auto slow = pl.resume(st, 4, "", {1, 1, 0.5, 1});
  EXPECT_TRUE(alike.state.segment_speeds.empty());
  ASSERT_EQ(slow.state.segment_speeds.size(), 2u);
  EXPECT_EQ(slow.state.segment_speeds[1], (std::vector<double>{1, 1, 0.5, 1}));
  // Rank 2's share of the predicted work is about half of the others'.
  const auto times = rank_times(slow.plan, pl.sim_env(4));
  std::vector<double> work(4, 0.0);
  for (size_t i = 0; i < times.size(); ++i) work[i % 4] += times[i];
  const double others = (work[0] + work[1] + work[3]) / 3;
  EXPECT_NEAR(work[2] / others, 0.5, 0.08) << work[0] << " " << work[2];
  // The epoch's samples once each: the 5 steps done, then the re-planned rest.
  const Plan first = pl.plan("balanced", 4, 0);
  std::vector<uint32_t> ids = trained_ids(first, 0, 5), rest = trained_ids(slow.plan);
  ids.insert(ids.end(), rest.begin(), rest.end());
  ids.insert(ids.end(), slow.plan.dropped.begin(), slow.plan.dropped.end());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, usable_ids(pl));
  // A later resume without new speeds keeps them; on another world size they are dropped.
  PlanState more = slow.state;
  more.segments.back().second = 2;
  const auto again = pl.resume(more, 4);
  EXPECT_EQ(jsonl(again.plan), jsonl(slow.plan));
  EXPECT_EQ(again.first_step, 2u);
  EXPECT_TRUE(pl.resume(more, 2).state.segment_speeds.back().empty());
  EXPECT_THROW(pl.resume(st, 4, "", {1, 0.5}), InputError);
}
