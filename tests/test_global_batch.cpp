// The global batch and the step mix as invariants of a plan, and the targets a plan cannot
// meet said in words (Planner::warnings): what a new user hit (docs/planner.md "Global batch").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "adaptiveload/util/format.h"
#include "adaptiveload/util/rng.h"
#include "planner_fixture.h"
#include "test_paths.h"
#include "test_support.h"

using namespace adaptiveload;
using namespace adaptiveload::test;
using adaptiveload::test::read_text;

namespace {

// The first `clips` Taichi-HD rows and the first `images` COCO rows.
Manifest real_subset(int64_t clips, int64_t images) {
  const Manifest all = real_manifest();
  Manifest m;
  auto add = [&](int64_t row) {
    const ClipInfo c = all.clip(row);
    m.add_row(std::string(all.path(row)), std::to_string(c.num_frames), std::to_string(c.height),
              std::to_string(c.width), c.fps > 0 ? fmt("%g", c.fps) : "", "subset.csv",
              m.total_rows() + 2, BadRowPolicy::kError);
  };
  for (int64_t r = 0; r < clips; ++r) add(r);
  for (int64_t r = 0; r < images; ++r) add(3334 + r);
  return m;
}

bool mentions(const std::vector<std::string>& w, const std::string& s) {
  return std::any_of(w.begin(), w.end(),
                     [&](const std::string& x) { return x.find(s) != std::string::npos; });
}

// An image + video mix as a user generated it: 40% clips of 17-121 frames at 480p-720p-class
// sizes, 60% images of 256-2048 px a side.
Manifest user_mix(uint64_t seed, size_t n) {
  Rng rng(seed, 3);
  Manifest m;
  const std::vector<std::pair<int, int>> clip_sizes = {
      {480, 832}, {720, 1280}, {480, 640}, {720, 960}, {540, 960}, {832, 480}, {1280, 720}};
  for (size_t i = 0; i < n; ++i) {
    const bool clip = rng.below(10) < 4;
    const std::string id = std::to_string(i);
    if (clip) {
      const auto [h, w] = clip_sizes[rng.below(uint32_t(clip_sizes.size()))];
      m.add_row("v/" + id + ".mp4", std::to_string(17 + rng.below(105)), std::to_string(h),
                std::to_string(w), "16", "mix.csv", int64_t(i) + 2, BadRowPolicy::kError);
    } else {
      m.add_row("i/" + id + ".jpg", "1", std::to_string(256 + rng.below(1793)),
                std::to_string(256 + rng.below(1793)), "", "mix.csv", int64_t(i) + 2,
                BadRowPolicy::kError);
    }
  }
  return m;
}

struct Spread {
  double tokens_dev = 0;  // largest |tokens_t - mean| / mean over the steps
  double imageless = 0;   // share of the steps without an image
};

Spread spread(const Planner& pl, const Plan& p) {
  Spread s;
  double total = 0;
  for (const StepInfo& st : p.steps) total += double(st.tokens);
  const double mean = total / double(p.num_steps());
  size_t no_image = 0;
  for (size_t t = 0; t < p.num_steps(); ++t) {
    s.tokens_dev = std::max(s.tokens_dev, std::abs(double(p.steps[t].tokens) - mean) / mean);
    bool image = false;
    for (uint64_t m = p.rank_begin[t * size_t(p.world_size)];
         m < p.rank_begin[(t + 1) * size_t(p.world_size)]; ++m)
      image = image || pl.bucketing().buckets[p.micro_batches[m].bucket].frames == 1;
    no_image += !image;
  }
  s.imageless = double(no_image) / double(p.num_steps());
  return s;
}

}  // namespace

TEST(GlobalBatch, AnUnreachableStepCountIsWarnedNotCappedSilently) {
  const Manifest m = real_subset(500, 500);
  for (const std::string gb : {"steps:1000", "samples:1", "tokens:1"}) {
    PlannerConfig cfg;
    cfg.world_size = 8;
    cfg.global_batch = gb;
    Planner pl(m, cfg);
    for (const std::string s : {"equal_tokens", "dual", "balanced"}) {
      const Plan p = pl.plan(s);
      ASSERT_LT(p.num_steps(), pl.target_steps()) << gb << " " << s;
      const auto w = pl.warnings(p);
      EXPECT_TRUE(mentions(w, "plans " + thousands(int64_t(p.num_steps())) + " steps, not the " +
                                  thousands(int64_t(pl.target_steps()))))
          << gb << " " << s << ": " << (w.empty() ? "no warning" : w.front());
      EXPECT_TRUE(mentions(w, "fill at most")) << gb << " " << s;
    }
  }
  // A reachable one says nothing about the step count.
  PlannerConfig cfg;
  cfg.global_batch = "steps:16";
  Planner pl(m, cfg);
  const Plan p = pl.plan("balanced");
  EXPECT_EQ(p.num_steps(), 16u);
  EXPECT_FALSE(mentions(pl.warnings(p), "steps, not the"));
}

TEST(GlobalBatch, SamplesPerStepAreWhatSamplesNAsks) {
  // samples:N is a per-step sample count: balanced keeps each step's samples near N (tokens:
  // and steps: keep tokens instead), and says so where it cannot.
  const Manifest m = real_manifest();
  PlannerConfig by_samples, by_steps;
  by_samples.global_batch = "samples:64";
  Planner ps(m, by_samples);
  by_steps.global_batch = "steps:" + std::to_string(ps.target_steps());
  Planner pt(m, by_steps);
  const Plan a = ps.plan("balanced"), b = pt.plan("balanced");
  ASSERT_EQ(a.num_steps(), ps.target_steps());
  EXPECT_NE(jsonl(a), jsonl(b)) << "samples:N must not plan as the same step count in tokens";
  uint32_t lo = UINT32_MAX, hi = 0;
  double n = 0;
  for (const StepInfo& s : a.steps)
    lo = std::min(lo, s.samples), hi = std::max(hi, s.samples), n += s.samples;
  const double mean = n / double(a.num_steps());
  const bool kept = double(hi) <= 1.1 * mean && double(lo) >= 0.9 * mean;
  EXPECT_TRUE(kept || mentions(ps.warnings(a), "samples per step range over"))
      << "samples per step " << lo << ".." << hi << " around " << mean << " and no warning";
  printf(
      "samples:64 on Taichi-HD + COCO, 8 ranks: balanced samples per step %u..%u (mean %.1f)%s\n",
      lo, hi, mean, kept ? "" : " (warned)");
}

TEST(GlobalBatch, StepSamplesCountTrainedSamplesAndPaddedBeside) {
  // A trainer that skips padded micro-batches normalises by `samples`: padded repeats are
  // counted apart (they were counted in `samples` too before).
  const Manifest m = real_subset(37, 41);
  PlannerConfig cfg;
  cfg.world_size = 16;
  Planner pl(m, cfg);
  for (const std::string s : {"equal_tokens", "fixed", "dual", "balanced"}) {
    const Plan p = pl.plan(s);
    uint64_t samples = 0, padded = 0, listed_padded = 0, listed = 0;
    for (const StepInfo& st : p.steps) samples += st.samples, padded += st.padded;
    for (const MicroBatch& mb : p.micro_batches) (mb.padded ? listed_padded : listed) += mb.count;
    EXPECT_EQ(samples, listed) << s;
    EXPECT_EQ(padded, listed_padded) << s;
    EXPECT_EQ(padded, p.padded_samples) << s;
    EXPECT_EQ(samples, trained_ids(p).size()) << s;
  }
}

TEST(GlobalBatch, AnUnsortedFrameListPlansAsItsSortedTwin) {
  const std::string dir = ::testing::TempDir();
  std::string wan = read_text(source_dir() + "/presets/grids/wan.json");
  const std::string sorted_frames =
      "[1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61, 65, 69, 73, 77, 81]";
  ASSERT_NE(wan.find(sorted_frames), std::string::npos);
  auto write = [&](const std::string& name, const std::string& frames) {
    std::string g = wan;
    g.replace(g.find(sorted_frames), sorted_frames.size(), frames);
    g.replace(g.find("\"name\": \"wan\""), 13, "\"name\": \"u\"");
    std::ofstream(dir + name) << g;
    return dir + name;
  };
  const Manifest m = real_manifest();
  PlannerConfig a, b;
  a.grid = write("grid_sorted.json", sorted_frames);
  b.grid = write(
      "grid_unsorted.json",
      "[81, 1, 77, 5, 73, 9, 69, 13, 65, 17, 61, 21, 57, 25, 53, 29, 49, 33, 45, 37, 41, 81]");
  Planner pa(m, a), pb(m, b);
  EXPECT_EQ(pa.bucketing().unfit.size(), 46u);
  EXPECT_EQ(pb.bucketing().unfit.size(), 46u);
  EXPECT_EQ(jsonl(pa.plan("balanced")), jsonl(pb.plan("balanced")));
}

TEST(GlobalBatch, BalancedKeepsTheBatchAndTheMixOnGeneratedMixes) {
  // Step sync, the global batch of a bucket loader (auto): every step's tokens within 10% of
  // the mean and images in every step, or a warning that says which is missed. On the user's
  // distribution at scale (where keeping them is cheap) they must hold.
  size_t plans = 0, warned = 0;
  double worst_dev = 0, worst_imageless = 0;
  for (const size_t n : {1500, 4000, 9000, 26000, 52000}) {
    for (uint64_t seed : {1, 2}) {
      if (n >= 26000 && seed == 2) continue;
      const Manifest m = user_mix(seed, n);
      for (int W : {8, 16}) {
        PlannerConfig cfg;
        cfg.world_size = W;
        cfg.oversize = OversizePolicy::kSkip;
        Planner pl(m, cfg);
        const Plan p = pl.plan("balanced");
        ASSERT_EQ(p.num_steps(), pl.target_steps());
        const Spread s = spread(pl, p);
        const auto w = pl.warnings(p);
        ++plans;
        const std::string where =
            std::to_string(n) + " rows, seed " + std::to_string(seed) + ", W=" + std::to_string(W);
        if (s.tokens_dev > kMaxBatchDev) {
          EXPECT_TRUE(mentions(w, "tokens per step range over")) << where;
        }
        if (s.imageless > kMaxUnmixed) {
          EXPECT_TRUE(mentions(w, "have no image")) << where;
        }
        if (!w.empty()) ++warned;
        if (n >= 9000) {
          EXPECT_LE(s.tokens_dev, kMaxBatchDev) << where;
          EXPECT_LE(s.imageless, kMaxUnmixed) << where;
        }
        worst_dev = std::max(worst_dev, s.tokens_dev),
        worst_imageless = std::max(worst_imageless, s.imageless);
        printf("%-30s steps %4zu  tokens/step max dev %5.1f%%  image-less steps %5.1f%%%s\n",
               where.c_str(), p.num_steps(), 100 * s.tokens_dev, 100 * s.imageless,
               w.empty() ? "" : "  (warned)");
      }
    }
  }
  printf(
      "%zu plans, %zu warned; worst tokens/step deviation %.1f%%, worst image-less share %.1f%%\n",
      plans, warned, 100 * worst_dev, 100 * worst_imageless);
}
