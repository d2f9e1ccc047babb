// Ranks that are not alike (docs/planner.md, "Unequal ranks"; issue 53 items 1-2): per-rank
// devices and speeds in the configuration and the simulator, balanced dealing each rank its
// share of the work by speed, every micro-batch within its own rank's memory, and alike ranks
// planned as before.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "adaptiveload/planner/ranks.h"
#include "adaptiveload/sim/metrics.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/option_word.h"
#include "adaptiveload/util/rng.h"
#include "planner_fixture.h"
#include "test_paths.h"
#include "test_support.h"

using namespace adaptiveload;
using namespace adaptiveload::test;

namespace {

// A generated image + video mix (as scripts/plan_identity.sh's mix50k, smaller so the test is
// quick): 40% clips of 17-121 frames at 480p-720p-class sizes, 60% images of 256-2048 px.
Manifest generated_mix(size_t n) {
  Rng rng(1, 53);
  Manifest m;
  const std::pair<int, int> sizes[] = {{480, 854}, {544, 960}, {720, 1280},
                                       {480, 640}, {720, 720}, {1280, 720}};
  for (size_t i = 0; i < n; ++i) {
    const std::string id = std::to_string(i);
    if (rng.below(10) < 4) {
      const auto [h, w] = sizes[rng.below(6)];
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

const Manifest& mix() {
  static const Manifest m = generated_mix(12000);
  return m;
}

PlannerConfig wan16(const std::string& sync, bool packing) {
  PlannerConfig c;
  c.model = "wan2.1-1.3b";
  c.world_size = 16;
  c.sync = sync;
  c.packing = packing ? "on" : "off";
  return c;
}

struct Outcome {
  double tput = 0;
  std::string memory;  // check_rank_memory's verdict
};

Outcome balanced(const Manifest& m, const PlannerConfig& c,
                 const std::string& strategy = "balanced") {
  const Planner pl(m, c);
  const Plan p = pl.plan(strategy);
  return {pl.simulate(p).throughput_samples_per_s, check_rank_memory(p, pl.sim_env(c.world_size))};
}

// 8 A100 + 8 H100: balanced's outcome there, and ideal (the uniform A100 and H100 balanced
// plans' throughputs averaged by rank count). `c` comes back with the mixed devices set.
struct Mixed {
  Outcome mixed;
  double ideal = 0;
};
Mixed a100_h100(const Manifest& m, PlannerConfig& c) {
  c.device = "a100";
  const double a100 = balanced(m, c).tput;
  c.device = "h100";
  const double h100 = balanced(m, c).tput;
  c.devices = "a100:8,h100:8";
  return {balanced(m, c), (a100 + h100) / 2};
}

// 8 A100 + 8 H100 on Taichi-HD + COCO (`sync`, `packing`): balanced at 90% of ideal or more,
// within every rank's memory; `each` sees every micro-batch of its plan (step, rank, its
// seconds at the A100's speed, its samples). Returns the plan's step count and ideal.
std::pair<size_t, double> a100_h100_taichi(
    const char* sync, bool packing,
    const std::function<void(size_t, int, double, uint32_t)>& each) {
  PlannerConfig c = wan16(sync, packing);
  const auto [mixed, ideal] = a100_h100(real_manifest(), c);
  std::printf("Taichi-HD + COCO %s packing=%d: ideal %.4f, balanced %.4f (%.1f%%)\n", sync,
              int(packing), ideal, mixed.tput, 100 * mixed.tput / ideal);
  EXPECT_GE(mixed.tput, 0.90 * ideal) << sync << " packing " << packing;
  EXPECT_EQ(mixed.memory, "");
  const Planner pl(real_manifest(), c);
  const Plan p = pl.plan("balanced");
  const SimEnv env = pl.sim_env(16);
  MicroShape scratch;
  for (size_t t = 0; t < p.num_steps(); ++t)
    for (int r = 0; r < 16; ++r) {
      const auto [b, e] = p.rank_range(t, r);
      for (uint64_t k = b; k < e; ++k)
        each(t, r, micro_batch_seconds(p, k, env, scratch), p.micro_batches[k].count);
    }
  return {p.num_steps(), ideal};
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(UnequalRanks, DevicesAndSpeedsAreParsedAndMessagesNameTheOption) {
  EXPECT_EQ(parse_devices("h200:2,h100:2", 4),
            (std::vector<std::string>{"h200", "h200", "h100", "h100"}));
  EXPECT_EQ(parse_devices("h200,h100,h100", 3), (std::vector<std::string>{"h200", "h100", "h100"}));
  EXPECT_NE(what_of([] { parse_devices("h200:8", 16); }).find("--devices"), std::string::npos);
  EXPECT_NE(what_of([] { parse_devices("h200:x", 1); }).find("--devices"), std::string::npos);
  {  // The sampler's words: the argument, no flag.
    set_front_end(FrontEnd::kPython);
    const std::string py = what_of([] { parse_devices("h200:x", 1); });
    set_front_end(FrontEnd::kCli);
    EXPECT_NE(py.find("(devices)"), std::string::npos) << py;
    EXPECT_EQ(py.find("--"), std::string::npos) << py;
  }
  const std::vector<double> s = parse_rank_speeds("5=0.7,2=0.9", 8);
  EXPECT_DOUBLE_EQ(s[5], 0.7);
  EXPECT_DOUBLE_EQ(s[2], 0.9);
  EXPECT_DOUBLE_EQ(s[0], 1.0);
  for (const char* bad : {"8=0.5", "1=0", "1=-2", "1=0.5,1=0.6", "x", "1=abc"})
    EXPECT_NE(what_of([&] { parse_rank_speeds(bad, 8); }).find("--rank-speed"), std::string::npos)
        << bad;
}

TEST(UnequalRanks, SpeedsComeFromThePresetsAndTheStatedFactors) {
  const DevicePreset a100 = load_device("a100"), h100 = load_device("h100");
  const RankDevices r = resolve_ranks("h200:2,h100:1,a100:1", "0=0.5", 4, load_device("h200"));
  // Least memory (80 GB: h100 and a100), the first in rank order: rank 2's h100.
  EXPECT_EQ(r.reference, 2u);
  EXPECT_DOUBLE_EQ(r.speed[0], 0.5);  // h200 computes as an h100, stated 0.5
  EXPECT_DOUBLE_EQ(r.speed[1], 1.0);
  EXPECT_DOUBLE_EQ(r.speed[3],
                   a100.peak_flops * a100.efficiency / (h100.peak_flops * h100.efficiency));
  EXPECT_TRUE(resolve_ranks("", "", 4, a100).empty());
}

TEST(UnequalRanks, SimulatorChargesEachRankAtItsSpeed) {
  PlannerConfig c = wan16("step", false);
  const Planner alike(mix(), c);
  c.rank_speed = "3=0.5,9=0.8";
  const Planner slow(mix(), c);
  // equal_tokens deals the same work whatever the speeds: the same plan, each rank's seconds
  // over its speed.
  const Plan p = alike.plan("equal_tokens");
  EXPECT_EQ(jsonl(p), jsonl(slow.plan("equal_tokens")));
  const std::vector<double> t1 = rank_times(p, alike.sim_env(16)),
                            t2 = rank_times(p, slow.sim_env(16));
  for (size_t i = 0; i < t1.size(); ++i) {
    const double speed = i % 16 == 3 ? 0.5 : i % 16 == 9 ? 0.8 : 1.0;
    EXPECT_DOUBLE_EQ(t2[i], t1[i] / speed) << i;
  }
  EXPECT_GT(slow.simulate(p).epoch_time_s, alike.simulate(p).epoch_time_s);
}

TEST(UnequalRanks, OtherStrategiesSizeBatchesForTheSmallestDevice) {
  PlannerConfig c = wan16("step", false);
  c.devices = "h200:8,h100:8";
  const Planner mixed(mix(), c);
  EXPECT_EQ(mixed.device().name, "h100");
  PlannerConfig h = wan16("step", false);
  h.device = "h100";
  const Planner h100(mix(), h);
  EXPECT_EQ(mixed.mem_budget_tokens(), h100.mem_budget_tokens());
  for (const char* s : {"equal_tokens", "dual"})
    EXPECT_EQ(jsonl(mixed.plan(s)), jsonl(h100.plan(s))) << s;
}

// The plan contract: every micro-batch within its own rank's memory. A plan that puts more
// on a rank than its device holds is named.
TEST(UnequalRanks, MemoryContractNamesAMicroBatchOverItsRank) {
  PlannerConfig c = wan16("step", false);
  c.devices = "h200:8,h100:8";
  const Planner pl(mix(), c);
  Plan p = pl.plan("balanced");
  const SimEnv env = pl.sim_env(16);
  EXPECT_EQ(check_rank_memory(p, env), "");
  // Rank 8 (an h100) gets one micro-batch of an image bucket grown past 80 GB.
  const uint64_t m = p.rank_begin[8];
  ASSERT_NE(p.micro_batches[m].bucket, kPackedBucket);
  const Bucket& b = pl.bucketing().buckets[p.micro_batches[m].bucket];
  const int64_t too_many = pl.memory().max_batch(b.tokens, env.rank_usable_bytes[8]) + 1;
  const uint32_t id = p.sample_ids[p.micro_batches[m].begin];
  MicroBatch big = p.micro_batches[m];
  big.begin = uint32_t(p.sample_ids.size());
  big.count = uint32_t(too_many);
  p.sample_ids.insert(p.sample_ids.end(), size_t(too_many), id);
  p.micro_batches[m] = big;
  const std::string why = check_rank_memory(p, env);
  EXPECT_NE(why.find("rank 8"), std::string::npos) << why;
}

// Acceptance (issue 53): one rank at 0.7x speed; balanced with the speed within 3% of ideal
// (uniform balanced's throughput times the mean speed) in step sync bucketed and packed and
// micro sync packed, every micro-batch within its rank's memory, and ahead of uniform
// balanced run on the slow cluster.
TEST(UnequalRanks, OneSlowRankBalancedReachesIdeal) {
  struct Case {
    const char* sync;
    bool packing;
  };
  for (const Case k : {Case{"step", false}, Case{"step", true}, Case{"micro", true}}) {
    PlannerConfig c = wan16(k.sync, k.packing);
    const Outcome uniform = balanced(mix(), c);
    // Uniform balanced's plan, run with rank 5 at 0.7x.
    PlannerConfig s = c;
    s.rank_speed = "5=0.7";
    const Planner slow(mix(), s), alike(mix(), c);
    const double blind = slow.simulate(alike.plan("balanced")).throughput_samples_per_s;
    const Outcome with_speed = balanced(mix(), s);
    const double ideal = uniform.tput * 15.7 / 16;
    std::printf(
        "%s packing=%d: ideal %.4f, balanced with the speed %.4f (%.1f%%), uniform balanced %.4f\n",
        k.sync, int(k.packing), ideal, with_speed.tput, 100 * with_speed.tput / ideal, blind);
    EXPECT_GE(with_speed.tput, 0.97 * ideal) << k.sync << " packing " << k.packing;
    EXPECT_GT(with_speed.tput, blind);
    EXPECT_EQ(with_speed.memory, "");
  }
}

// Taichi-HD + COCO, the real data, in both sync modes. Step sync: balanced gives long
// clips steps of their own (3 a rank, 12.8 s each), so within a step a 0.7x rank can take 2 of
// them (a step of 36.4 s where its others end at 31) or 3; dealt against each step's share of
// the time over the epoch (Dealer::fill), it holds 2 where the others hold 3 and 1 where they
// hold 2. Micro sync unpacked: the slow rank's samples given up into slots of their own (trim).
TEST(UnequalRanks, OneSlowRankTaichiCoco) {
  for (const char* sync : {"step", "micro"})
    for (bool packing : {false, true}) {
      PlannerConfig c = wan16(sync, packing);
      const double ideal = balanced(real_manifest(), c).tput * 15.7 / 16;
      c.rank_speed = "5=0.7";
      const Outcome with_speed = balanced(real_manifest(), c);
      std::printf("Taichi-HD + COCO %s packing=%d: ideal %.4f, with the speed %.4f (%.2f%%)\n",
                  sync, int(packing), ideal, with_speed.tput, 100 * with_speed.tput / ideal);
      EXPECT_GE(with_speed.tput, 0.97 * ideal) << sync << " packing " << packing;
      EXPECT_EQ(with_speed.memory, "");
    }
}

// Acceptance (issue 53): 8 A100 + 8 H100, balanced within 10% of ideal (the uniform A100 and
// uniform H100 plans' throughputs averaged by rank count), step sync bucketed and packed and
// micro sync packed, far ahead of the strategies that deal equal work.
TEST(UnequalRanks, A100AndH100BalancedReachesIdeal) {
  struct Case {
    const char* sync;
    bool packing;
  };
  for (const Case k : {Case{"step", false}, Case{"step", true}, Case{"micro", true}}) {
    const bool packing = k.packing;
    PlannerConfig c = wan16(k.sync, packing);
    const auto [mixed, ideal] = a100_h100(mix(), c);
    const double dual = balanced(mix(), c, "dual").tput;
    std::printf("%s packing=%d: ideal %.4f, balanced %.4f (%.1f%%), dual %.4f\n", k.sync,
                int(packing), ideal, mixed.tput, 100 * mixed.tput / ideal, dual);
    EXPECT_GE(mixed.tput, 0.90 * ideal) << k.sync << " packing " << packing;
    EXPECT_GT(mixed.tput, 1.5 * dual);
    EXPECT_EQ(mixed.memory, "");
  }
}

// Micro sync bucketed, 8 A100 + 8 H100 on a 50k generated mix: a slot holds one micro-batch a
// rank, so an H100 at the A100's micro-batch sizes ends its slot at 1 / 2.85 of the A100's and
// waits. With --mem-budget auto its sizes grow with its speed where its memory holds them
// (rank_caps): from 79.5% of ideal to 90.6%. A stated --mem-budget is kept on every rank.
TEST(UnequalRanks, A100AndH100MicroSyncBucketedFastRanksTakeLargerMicroBatches) {
  const Manifest m = generated_mix(50000);
  PlannerConfig c = wan16("micro", false);
  const auto [mixed, ideal] = a100_h100(m, c);
  std::printf("50k mix micro packing=0: ideal %.4f, balanced %.4f (%.1f%%)\n", ideal, mixed.tput,
              100 * mixed.tput / ideal);
  EXPECT_GE(mixed.tput, 0.90 * ideal);
  EXPECT_EQ(mixed.memory, "");
  // Tokens of the largest H100 micro-batch over M_mem: above 1 with auto, at most 1 when stated.
  auto over_budget = [&](const PlannerConfig& cfg) {
    const Planner pl(m, cfg);
    const Plan p = pl.plan("balanced");
    double most = 0;
    for (size_t t = 0; t < p.num_steps(); ++t)
      for (int r = 8; r < 16; ++r) {
        const auto [b, e] = p.rank_range(t, r);
        for (uint64_t k = b; k < e; ++k) {
          const MicroBatch& mb = p.micro_batches[k];
          most =
              std::max(most, double(mb.count) * double(pl.bucketing().buckets[mb.bucket].tokens));
        }
      }
    return most / double(pl.mem_budget_tokens());
  };
  EXPECT_GT(over_budget(c), 1.0);
  PlannerConfig stated = c;
  stated.mem_budget_tokens = Planner(m, c).mem_budget_tokens();
  EXPECT_LE(over_budget(stated), 1.0);
}

// Taichi-HD + COCO in step sync, 8 A100 + 8 H100: nearly all the work is long clips (35.9 s on
// an A100, 12.6 s on an H100), so an A100 can only take its share in a step long enough for a
// clip, where each H100 does about 3. fill's lumped candidates lengthen that share of the steps
// (and shorten the rest by as much): from 83.5% of ideal (H100s 2 clips a step, the A100s
// nearly idle) to 97%, the global batch's tokens per step then over about 0.5-2.1x their mean.
TEST(UnequalRanks, A100AndH100StepSyncGivesTheSlowRanksLongClipsInLongerSteps) {
  for (const bool packing : {false, true}) {
    std::vector<size_t> in_step;  // per step, the A100s' micro-batches of a long clip
    const size_t steps =
        a100_h100_taichi("step", packing, [&](size_t t, int r, double s, uint32_t) {
          if (in_step.size() <= t) in_step.resize(t + 1, 0);
          in_step[t] += r < 8 && s > 30;  // the A100s (speed 1: seconds as the reference's)
        }).first;
    size_t slow_long = 0, long_steps = 0;
    for (size_t here : in_step) slow_long += here, long_steps += here > 0;
    // A100s hold long clips, in a part of the steps only.
    EXPECT_GT(slow_long, 100u) << "packing " << packing;
    EXPECT_LT(long_steps, steps / 2) << "packing " << packing;
    PlannerConfig c = wan16("step", packing);
    c.devices = "a100:8,h100:8";
    EXPECT_EQ(steps, Planner(real_manifest(), c).plan("equal_tokens").num_steps());  // the batch's
  }
}

// Taichi-HD + COCO in micro sync, 8 A100 + 8 H100: nearly all the work is long clips (35.9 s
// on an A100, 12.6 s on an H100), and the global batch's 161 steps need 161 slots at least,
// about 17 s each at the fluid share, where each H100 holds one clip and the A100s little. The
// epoch's first slots lumped (Dealer::form_slots, lumped: 37.8 s, each A100 a clip and each
// H100 3, its micro-batch sizes grown with its speed and rounded) take the A100s' share of the
// clips: from 54% of ideal (77% with the rationed slots alone) to 94%.
TEST(UnequalRanks, A100AndH100MicroSyncGivesTheSlowRanksLongClipsInLumpedSlots) {
  for (const bool packing : {false, true}) {
    size_t slow_long = 0, fast_three = 0;
    const double ideal =
        a100_h100_taichi("micro", packing, [&](size_t, int r, double s, uint32_t count) {
          if (r < 8) slow_long += s > 30;                  // A100 seconds
          if (r >= 8) fast_three += count >= 3 && s > 90;  // H100s, 3 long clips
        }).second;
    EXPECT_GT(slow_long, 100u) << "packing " << packing;   // A100s hold long clips
    EXPECT_GT(fast_three, 100u) << "packing " << packing;  // H100s 3 of them beside
    // The same cluster listed the other way round (the H100 then the reference device).
    PlannerConfig h = wan16("micro", packing);
    h.devices = "h100:8,a100:8";
    const Outcome reversed = balanced(real_manifest(), h);
    EXPECT_GE(reversed.tput, 0.90 * ideal) << "packing " << packing;
    EXPECT_EQ(reversed.memory, "");
  }
}

// Plan layout release 3 (PlanState::kLayout) brought the lumped steps and slots and the sizes
// grown with the device's speed: a state saved by the release before (layout 2) resumes its
// epoch on unequal ranks as that release planned it, every sample once, and saves as it was
// read.
TEST(UnequalRanks, AStateOfTheReleaseBeforeResumesItsEpochAsItWasPlanned) {
  PlannerConfig c = wan16("micro", false);
  c.devices = "a100:8,h100:8";
  const Planner pl(real_manifest(), c);
  const std::string text = state_to_json(pl.initial_state("balanced"));
  ASSERT_NE(text.find("\"layout\":3"), std::string::npos) << text;
  std::string before = text;
  before.replace(before.find("\"layout\":3"), 10, "\"layout\":2");
  const PlanState old = state_from_json(before);
  EXPECT_EQ(old.layout, 2);
  EXPECT_EQ(state_to_json(old), before);
  const Plan fresh = pl.plan("balanced");
  const Planner::Resumed a = pl.resume(state_from_json(text), 16), b = pl.resume(old, 16);
  EXPECT_EQ(jsonl(a.plan), jsonl(fresh));
  EXPECT_NE(jsonl(b.plan), jsonl(fresh));
  // Without the lumped slots: about 77% of ideal where release 3 plans 94%.
  EXPECT_LT(pl.simulate(b.plan).throughput_samples_per_s,
            0.9 * pl.simulate(a.plan).throughput_samples_per_s);
  expect_plan_contract(pl, b.plan, "a layout-2 state's epoch on unequal ranks");
}

// The CLI: --devices and --rank-speed reach the plan; the table and --json show each rank's
// device and speed; a wrong count is an error naming --devices.
TEST(UnequalRanks, CliShowsTheRanks) {
  const std::string cli =
      cli_path() + " plan -m " + data_file("taichi_hd.csv") + " -w 4 -s balanced ";
  const CommandResult table = run_command(cli + "--devices a100:2,h100:2 --rank-speed 3=0.5 2>&1");
  EXPECT_EQ(table.code, 0) << table.out;
  EXPECT_NE(
      table.out.find("ranks: 2 x a100 (speed 1), 1 x h100 (speed 2.85), 1 x h100 (speed 1.43)"),
      std::string::npos)
      << table.out;
  const CommandResult json =
      run_command(cli + "--devices a100:2,h100:2 --rank-speed 3=0.5 --json 2>/dev/null");
  EXPECT_NE(json.out.find("\"device\": \"h100\""), std::string::npos);
  EXPECT_NE(json.out.find("\"ranks\": ["), std::string::npos);
  const std::string html = ::testing::TempDir() + "unequal_ranks_report.html";
  const CommandResult report = run_command(cli_path() + " report -m " + data_file("taichi_hd.csv") +
                                           " -w 4 --devices a100:2,h100:2 -o " + html + " 2>&1");
  EXPECT_EQ(report.code, 0) << report.out;
  EXPECT_NE(read_text(html).find("Ranks are not alike (2 x a100 (speed 1), 2 x h100 (speed 2.85)"),
            std::string::npos);
  std::remove(html.c_str());
  const CommandResult bad = run_command(cli + "--devices a100:3 2>&1");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--devices"), std::string::npos) << bad.out;
}

// Plans are a pure function of the inputs: every rank reaches the same one.
TEST(UnequalRanks, SamePlanOnEveryRank) {
  PlannerConfig c = wan16("micro", false);
  c.rank_speed = "5=0.7";
  EXPECT_EQ(jsonl(Planner(mix(), c).plan("balanced")), jsonl(Planner(mix(), c).plan("balanced")));
}

}  // namespace

// The figures of docs/planner.md "Unequal ranks" (not run by default: about a minute on the
// 50k mix). AL_MIX50K: scripts/plan_identity.sh's generated mix50k.csv.
//   build/tests/adaptiveload_tests --gtest_also_run_disabled_tests --gtest_filter='*Figures*'
TEST(UnequalRanks, DISABLED_Figures) {
  std::vector<std::pair<std::string, Manifest>> sets;
  sets.emplace_back("Taichi-HD + COCO", real_manifest());
  if (const char* p = std::getenv("AL_MIX50K")) {
    Manifest m;
    m.load(p, BadRowPolicy::kError);
    sets.emplace_back("generated 50k mix", std::move(m));
  }
  for (const auto& [name, m] : sets)
    for (const char* sync : {"step", "micro"})
      for (bool packing : {false, true}) {
        PlannerConfig c = wan16(sync, packing);
        const Planner alike(m, c);
        const Plan uniform_plan = alike.plan("balanced");
        const double uniform = alike.simulate(uniform_plan).throughput_samples_per_s;
        PlannerConfig s = c;
        s.rank_speed = "5=0.7";
        const Planner slow(m, s);
        const Plan p = slow.plan("balanced");
        const Metrics ms = slow.simulate(p);
        const double blind = slow.simulate(uniform_plan).throughput_samples_per_s,
                     ideal = uniform * 15.7 / 16;
        PlannerConfig a = c, h = c, x = c;
        a.device = "a100", h.device = "h100", x.devices = "a100:8,h100:8";
        const double ta = balanced(m, a).tput, th = balanced(m, h).tput, ideal2 = (ta + th) / 2;
        const Planner mixed(m, x);
        const Plan pm = mixed.plan("balanced");
        const Metrics mm = mixed.simulate(pm);
        double best = 0;
        std::string best_name;
        for (const StrategyEntry& e : strategies())
          if (!e.mixes_groups() && mixed.cannot_plan(e).empty() && (!e.packs() || packing)) {
            const double t = mixed.simulate(mixed.plan(e.name)).throughput_samples_per_s;
            if (t > best) best = t, best_name = e.name;
          }
        std::printf(
            "| %s | %s | %s | %.3f | %.3f (%.2f%%, tok dev %.0f%%) | %.3f | %.3f | %.3f (%.1f%%, "
            "tok dev %.0f%%) "
            "| %.3f %s | %s |\n",
            name.c_str(), sync, packing ? "on" : "off", ideal, ms.throughput_samples_per_s,
            100 * ms.throughput_samples_per_s / ideal, 100 * ms.global_batch_tokens_max_dev, blind,
            ideal2, mm.throughput_samples_per_s, 100 * mm.throughput_samples_per_s / ideal2,
            100 * mm.global_batch_tokens_max_dev, best, best_name.c_str(),
            check_rank_memory(pm, mixed.sim_env(16)).empty() &&
                    check_rank_memory(p, slow.sim_env(16)).empty()
                ? "yes"
                : "NO");
      }
}
