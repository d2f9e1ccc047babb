// Reliability properties beyond test_planner.cpp (which has the 1,000-case random-manifest
// contract test and resume / elastic tests on the real manifests):
// - resume at every step boundary, every strategy, on random small manifests;
// - elastic resume across random world-size sequences in 1..1024, simulated as a real run
//   would do it (train some steps of the plan in hand, save, resume on another world size);
// - corrupted states: random byte flips, insertions and truncations of a valid state JSON
//   are rejected, or parse to a state that is either the same or detected as different.
// The fuzz regressions (fuzz/regressions/<target>/) are replayed by scripts/fuzz.sh.
#include <gtest/gtest.h>

#include <memory>

#include "adaptiveload/util/error.h"
#include "adaptiveload/util/rng.h"
#include "planner_fixture.h"
#include "test_paths.h"

using namespace adaptiveload;
using namespace adaptiveload::test;

namespace {

const std::vector<std::string> kStrategies = {"equal_tokens", "fixed", "dual", "balanced"};

// A random manifest of 1..max_rows clips and images (as in test_planner's property test).
std::string random_csv(Rng& rng, int max_rows) {
  std::string csv = "path,num_frames,height,width,fps\n";
  const int rows = 1 + int(rng.below(uint32_t(max_rows)));
  const int video_share = int(rng.below(101));
  for (int i = 0; i < rows; ++i) {
    const bool video = int(rng.below(100)) < video_share;
    const int h = 120 + int(rng.below(1400)), w = 120 + int(rng.below(1400));
    csv += "r" + std::to_string(i) + (video ? ".mp4," : ".jpg,");
    csv += video ? std::to_string(2 + rng.below(600)) + "," + std::to_string(h) + "," +
                       std::to_string(w) + "," + (rng.below(2) ? "30\n" : "24\n")
                 : "1," + std::to_string(h) + "," + std::to_string(w) + ",\n";
  }
  return csv;
}

std::unique_ptr<Planner> random_planner(Rng& rng, int max_rows, int world_size, Manifest& m) {
  m.load_text(random_csv(rng, max_rows), "random.csv", BadRowPolicy::kError);
  PlannerConfig cfg;
  cfg.world_size = world_size;
  cfg.seed = rng.next_u32();
  cfg.epoch = rng.below(3);
  cfg.end_policy = rng.below(2) ? EndPolicy::kPad : EndPolicy::kDrop;
  cfg.oversize = OversizePolicy::kSkip;
  if (rng.below(3) == 0) cfg.mem_budget_tokens = 80000 + rng.below(400000);
  return std::make_unique<Planner>(m, cfg);
}

// The plan of `strategy`, or null when `fixed` has no table entry for a bucket in use.
std::unique_ptr<Plan> plan_or_null(const Planner& pl, const std::string& s) {
  try {
    return std::make_unique<Plan>(pl.plan(s));
  } catch (const ConfigError& e) {
    EXPECT_EQ(s, "fixed") << e.what();
    return nullptr;
  }
}

}  // namespace

TEST(Reliability, ResumeAtEveryStepBoundaryOnRandomManifests) {
  Rng rng(2026, 71);
  int cases = 0, resumes = 0;
  for (int c = 0; c < 60; ++c) {
    Manifest m;
    const int W = 1 + int(rng.below(8));
    auto pl = random_planner(rng, 600, W, m);
    for (const auto& s : kStrategies) {
      auto full = plan_or_null(*pl, s);
      if (!full) continue;
      ++cases;
      const std::string all = jsonl(*full);
      for (size_t k = 0; k <= full->num_steps(); ++k) {
        PlanState st = pl->initial_state(s);
        st.segments.back().second = int64_t(k);
        Planner::Resumed r = pl->resume(state_from_json(state_to_json(st)), W);
        ASSERT_EQ(r.first_step, k);
        ASSERT_EQ(jsonl(r.plan), all)
            << "case " << c << " " << s << " W=" << W << " resumed at step " << k;
        // What is still to run, plus what ran, is every usable sample exactly once.
        std::vector<uint32_t> ids = trained_ids(*full, 0, k), rest = trained_ids(r.plan, k);
        ids.insert(ids.end(), rest.begin(), rest.end());
        ids.insert(ids.end(), r.plan.dropped.begin(), r.plan.dropped.end());
        std::sort(ids.begin(), ids.end());
        ASSERT_EQ(ids, usable_ids(*pl)) << "case " << c << " " << s << " at step " << k;
        ++resumes;
      }
    }
  }
  EXPECT_GE(cases, 180);
  RecordProperty("resumes", resumes);
  std::printf("[ reliability ] %d plans resumed at every step boundary: %d resumes\n", cases,
              resumes);
}

TEST(Reliability, ElasticResumeAcrossRandomWorldSizeSequences) {
  // A run as a trainer performs it: plan in hand, train some of its steps, save the state,
  // resume on another world size from the saved (serialised) state; 2..5 changes, world
  // sizes log-uniform in 1..1024; the trained samples plus what the final plan still holds
  // (and drops) are the usable samples, each exactly once.
  Rng rng(2026, 72);
  int runs = 0, changes = 0;
  for (int c = 0; c < 60; ++c) {
    auto pick_w = [&] {
      const uint32_t e = rng.below(11);
      return std::max(1, int(1u << e) - int(rng.below((1u << e) / 2 + 1)));
    };
    const int W0 = pick_w();
    Manifest m;
    auto pl = random_planner(rng, 2500, W0, m);
    const std::vector<uint32_t> want = usable_ids(*pl);
    for (const std::string s : {"balanced", "dual", "equal_tokens"}) {
      std::vector<uint32_t> trained;
      Planner::Resumed r = pl->resume(pl->initial_state(s, W0), W0);
      std::string trail = std::to_string(W0);
      const int n_changes = 2 + int(rng.below(4));
      for (int k = 0; k < n_changes; ++k) {
        const int64_t steps = int64_t(rng.below(uint32_t(r.plan.num_steps() - r.first_step) + 1));
        std::vector<uint32_t> now = trained_ids(r.plan, r.first_step, r.first_step + size_t(steps));
        trained.insert(trained.end(), now.begin(), now.end());
        PlanState saved = r.state;
        saved.segments.back().second = int64_t(r.first_step) + steps;
        int w = pick_w();
        if (w == saved.segments.back().first) w = w % 1024 + 1;  // a change every time
        trail += " -(" + std::to_string(steps) + ")-> " + std::to_string(w);
        r = pl->resume(state_from_json(state_to_json(saved)), w);
        ASSERT_EQ(r.plan.world_size, w);
        ASSERT_EQ(r.first_step, 0u);
        ASSERT_EQ(r.state.segments.size(), saved.segments.size() + 1);
        ++changes;
      }
      std::vector<uint32_t> ids = trained, rest = trained_ids(r.plan);
      ids.insert(ids.end(), rest.begin(), rest.end());
      ids.insert(ids.end(), r.plan.dropped.begin(), r.plan.dropped.end());
      std::sort(ids.begin(), ids.end());
      ASSERT_EQ(ids, want) << "case " << c << " " << s << " world sizes " << trail;
      ++runs;
    }
  }
  std::printf("[ reliability ] %d elastic runs, %d world-size changes, nothing lost or repeated\n",
              runs, changes);
}

TEST(Reliability, CorruptedStatesAreRejectedOrDetected) {
  Manifest m;
  m.load(data_file("taichi_hd.csv"), BadRowPolicy::kError);
  PlannerConfig cfg;
  cfg.world_size = 4;
  cfg.seed = 0x5eed;
  Planner pl(m, cfg);
  PlanState good = pl.initial_state("balanced");
  good.segments.back().second = 7;
  const std::string text = state_to_json(good);
  const Planner::Resumed want = pl.resume(good, 4);
  const std::string want_plan = jsonl(want.plan, want.first_step);
  Rng rng(2026, 73);
  int rejected_parse = 0, rejected_resume = 0, same = 0, other_position = 0;
  const int kCases = 10000;
  for (int c = 0; c < kCases; ++c) {
    std::string bad = text;
    const uint32_t kind = rng.below(4);
    if (kind == 0) {
      bad[rng.below(uint32_t(bad.size()))] = char(rng.below(256));  // byte replaced
    } else if (kind == 1) {
      bad[rng.below(uint32_t(bad.size()))] ^= char(1u << rng.below(8));  // bit flip
    } else if (kind == 2) {
      bad.resize(rng.below(uint32_t(bad.size())));  // truncated
    } else {
      bad.insert(bad.begin() + rng.below(uint32_t(bad.size() + 1)),
                 char(rng.below(256)));  // byte inserted
    }
    PlanState st;
    try {
      st = state_from_json(bad);
    } catch (const InputError&) {
      ++rejected_parse;
      continue;
    }
    const bool identity_changed = st.fingerprint != good.fingerprint || st.seed != good.seed ||
                                  st.strategy != good.strategy || st.version != good.version;
    // A layout read as another (a flipped digit, or the key lost: an earlier release's 1) is
    // another plan of the same epoch: it must keep the contract, not repeat the saved one.
    const bool same_state = !identity_changed && st.epoch == good.epoch &&
                            st.segments == good.segments && st.layout == good.layout;
    try {
      Planner::Resumed r = pl.resume(st, st.segments.back().first);
      ASSERT_FALSE(identity_changed)
          << "a state with another fingerprint, seed or strategy was accepted: " << bad;
      if (same_state) {
        ASSERT_EQ(jsonl(r.plan, r.first_step), want_plan) << "same state, different plan: " << bad;
        ++same;
      } else {
        // Another epoch or step count that is still a valid position (the state has no
        // checksum, so an edited step count is accepted as that position): the plan from
        // there must still keep the contract.
        ASSERT_EQ(r.first_step, size_t(st.segments.back().second));
        expect_plan_contract(pl, r.plan, "mutated state " + bad);
        ++other_position;
      }
    } catch (const InputError&) {
      ++rejected_resume;
    } catch (const ConfigError&) {
      ++rejected_resume;  // e.g. a strategy name no longer known
    }
  }
  std::printf(
      "[ reliability ] %d corrupted states: %d rejected by the parser, %d by resume, %d unchanged "
      "(same "
      "plan), %d another valid position\n",
      kCases, rejected_parse, rejected_resume, same, other_position);
  EXPECT_EQ(rejected_parse + rejected_resume + same + other_position, kCases);
  EXPECT_GT(rejected_parse, kCases / 2);
}

TEST(Reliability, FuzzFoundStateBugsStayFixed) {
  // fuzz/regressions/fuzz_state/: both inputs must be rejected with InputError (scripts/fuzz.sh
  // replays the files through the fuzz target as well).
  for (const char* name : {"format_not_a_string.json", "version_wraps_to_1.json"}) {
    const std::string text = read_file((source_dir() + "/fuzz/regressions/fuzz_state/") + name);
    EXPECT_THROW(state_from_json(text), InputError) << name;
  }
}
