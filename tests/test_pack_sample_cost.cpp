// A pack's cost per sample (CostModel::pack_sample_s, the profile's "cost.pack_sample_s"): what
// the packed forward pays per sample beyond its work (cost_model.h). Priced on packs of several
// shapes only, fitted only from observations that hold packs, carried by the profile, the
// compact cost object of online adaptation and the fingerprint, and seen by balanced's choice
// between its packed and its bucketed plan.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "adaptiveload/cost/calibration.h"
#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/plan/state.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/rng.h"
#include "planner_fixture.h"

using namespace adaptiveload;

namespace {

std::vector<Bucket> three_buckets() {
  std::vector<Bucket> b(3);
  const int64_t tokens[] = {880, 3600, 14040};
  for (size_t i = 0; i < b.size(); ++i) b[i].tokens = tokens[i], b[i].frames = i == 2 ? 33 : 1;
  return b;
}

// A fitted profile whose cost carries `extra` (e.g. ,"pack_sample_s":0.01).
std::string write_profile(const std::string& name, const std::string& extra) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << R"({"format":"adaptiveload-profile","version":1,
    "cost":{"a":2e-6,"b":4e-10,"c0":1e-3,"overhead_s":0.01,"half_efficiency_tokens":256)"
                      << extra << "}}";
  return path;
}

std::string profile_error(const std::string& path) {
  try {
    ProfileCost c(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Points of one shape and packs of several from t(S) = a S + b S^2 + c0, an overhead, no ramp,
// and `per_sample` seconds per sample of a pack, +-1% noise.
std::vector<Observation> points_and_packs(double per_sample, bool packs) {
  const double a = 1.5e-5, b = 2e-8, c0 = 4e-4, ov = 5e-3;
  auto t = [&](double S) { return a * S + b * S * S + c0; };
  Rng rng(3, 9);
  auto noisy = [&](double x) { return x * (1 + (double(rng.below(2001)) / 1000.0 - 1.0) * 0.01); };
  std::vector<Observation> obs;
  for (int64_t S : {88, 176, 352, 704, 1008})
    for (int64_t B : {1, 2, 4, 8}) obs.push_back({{{S, B}}, noisy(ov + t(double(S)) * double(B))});
  if (packs)
    for (int i = 0; i < 16; ++i) {
      std::vector<std::pair<int64_t, int64_t>> parts = {{88, 1 + i % 4}, {352, 1 + i % 3}};
      if (i % 2) parts.push_back({1008, 1});
      double w = 0, n = 0;
      for (auto [S, B] : parts) w += double(B) * t(double(S)), n += double(B);
      Observation o;
      o.micro_batches.emplace_back(parts);
      o.time_s = noisy(ov + w + per_sample * n);
      obs.push_back(o);
    }
  return obs;
}

}  // namespace

TEST(PackSampleCost, PaidByAPackOfSeveralShapesPerSampleAndNeverByOneShape) {
  const auto b = three_buckets();
  PowerCost c(2e-9, 1.7);
  c.overhead_s = 0.004, c.half_efficiency_tokens = 512;
  MicroShape pack, one;
  pack.add(b[0], 3), pack.add(b[2], 1);
  one.add(b[1], 5);
  const double before_pack = c.cost(pack), before_one = c.cost(one);
  c.pack_sample_s = 0.002;
  EXPECT_DOUBLE_EQ(c.cost(pack), before_pack + 4 * 0.002);
  EXPECT_EQ(c.cost(one), before_one) << "a micro-batch of one shape runs the batched forward";
  EXPECT_EQ(c.cost(one), c.microbatch_time(5, b[1]));
  // Not work: the table's useful column does not count it.
  EXPECT_DOUBLE_EQ(c.work(pack), 3 * c.sample_time(b[0]) + c.sample_time(b[2]));
  SeqParallel sp;
  sp.sizes = 0b11, sp.a2a_s_per_token = 3e-9, sp.a2a_latency_s = 0.001;
  EXPECT_EQ(group_cost(c, pack, 1, sp), c.cost(pack));
  const double wg = 3 * group_sample_time(c, b[0], 2, sp) + group_sample_time(c, b[2], 2, sp);
  EXPECT_DOUBLE_EQ(group_cost(c, pack, 2, sp),
                   c.overhead_s + sp.a2a_latency_s +
                       wg * (1 + c.half_efficiency_tokens * 2 / (3.0 * 880 + 14040)) + 4 * 0.002);
  // The cost model as a group sees it carries the term.
  EXPECT_DOUBLE_EQ(GroupCost(c, 2, sp).cost(pack), group_cost(c, pack, 2, sp));
}

TEST(PackSampleCost, FittedFromPacksOnlyAndKeptWhenGiven) {
  // With packs, the fit recovers the per-sample cost of a pack beside the points' model.
  const CalibrationFit f = fit_observations(points_and_packs(0.003, true));
  EXPECT_NEAR(f.pack_sample_s, 0.003, 0.0006);
  EXPECT_NEAR(f.b, 2e-8, 0.3e-8);
  EXPECT_LT(f.max_rel_error, 0.03);
  EXPECT_NEAR(nlohmann::json::parse(cost_json(f)).at("pack_sample_s").get<double>(),
              f.pack_sample_s, 1e-15);
  // Priced as the cost model prices a pack.
  const std::vector<Observation> obs = points_and_packs(0.003, true);
  const Observation& pack = obs.back();
  double w = 0, n = 0, N = 0;
  for (auto [S, B] : pack.micro_batches[0].parts)
    w += double(B) * (f.a * double(S) + f.b * double(S) * double(S) + f.c0), n += double(B),
        N += double(B * S);
  EXPECT_DOUBLE_EQ(observation_time(f, pack),
                   f.overhead_s + w * (1 + f.half_efficiency_tokens / N) + f.pack_sample_s * n);
  // The same packs without the term fit worse: the term is what they cost.
  const CalibrationFit without = fit_observations(points_and_packs(0.003, true), -1, -1, 0);
  EXPECT_EQ(without.pack_sample_s, 0.0);
  EXPECT_GT(without.max_rel_error, 2 * f.max_rel_error);
  // Packs that cost their work fit no term; points alone have none to fit, and their cost
  // object reads as before (no key).
  EXPECT_LT(fit_observations(points_and_packs(0, true)).pack_sample_s, 2e-4);
  const CalibrationFit points = fit_observations(points_and_packs(0.003, false));
  EXPECT_EQ(points.pack_sample_s, 0.0);
  EXPECT_FALSE(nlohmann::json::parse(cost_json(points)).contains("pack_sample_s"));
  // Given (online adaptation keeps the prior's), it stays.
  const CalibrationFit kept = fit_observations(points_and_packs(0.003, true), 5e-3, 0, 0.0025);
  EXPECT_EQ(kept.pack_sample_s, 0.0025);
  EXPECT_EQ(kept.overhead_s, 5e-3);
}

TEST(PackSampleCost, TheProfileAndTheCompactCostObjectCarryIt) {
  EXPECT_EQ(ProfileCost(write_profile("ps_none.json", "")).pack_sample_s, 0.0);
  EXPECT_EQ(ProfileCost(write_profile("ps_on.json", R"(,"pack_sample_s":0.0025)")).pack_sample_s,
            0.0025);
  EXPECT_NE(
      profile_error(write_profile("ps_neg.json", R"(,"pack_sample_s":-1)")).find("must be >= 0"),
      std::string::npos);
  EXPECT_NE(profile_error(write_profile("ps_str.json", R"(,"pack_sample_s":"1")"))
                .find("'pack_sample_s' must be a number"),
            std::string::npos);
  // The compact cost object (a refit stored in a sampler state): kept when > 0, and a cost
  // without it (or with 0) reads and writes as before.
  const std::string base =
      R"({"a":1e-5,"b":2e-8,"c0":4e-4,"overhead_s":0.005,"half_efficiency_tokens":0)";
  const std::string with = canonical_cost_json(base + R"(,"pack_sample_s":0.002})");
  EXPECT_EQ(nlohmann::json::parse(with).at("pack_sample_s").get<double>(), 0.002);
  EXPECT_EQ(ProfileCost::from_cost_json(with)->pack_sample_s, 0.002);
  EXPECT_EQ(canonical_cost_json(base + R"(,"pack_sample_s":0})"), canonical_cost_json(base + "}"));
  EXPECT_EQ(ProfileCost::from_cost_json(base + "}")->pack_sample_s, 0.0);
  EXPECT_THROW(canonical_cost_json(base + R"(,"pack_sample_s":-0.1})"), InputError);
  EXPECT_THROW(canonical_cost_json(base + R"(,"pack_sample_s":"x"})"), InputError);
}

TEST(PackSampleCost, PartOfTheFingerprintAndOfBalancedsChoiceToPack) {
  const Manifest m = test::real_manifest();
  PlannerConfig cfg;
  cfg.cost_model = "profile";
  cfg.world_size = 4;
  cfg.packing = "on";
  // One path, rewritten: the fingerprint hashes the path too, so only the term may differ.
  cfg.profile = write_profile("ps_plan.json", "");
  const Planner a(m, cfg);
  const Plan pa = a.plan("balanced");
  write_profile("ps_plan.json", R"(,"pack_sample_s":1.0)");
  const Planner b(m, cfg);
  EXPECT_NE(a.fingerprint(), b.fingerprint())
      << "a state must not resume under another price of packs";
  // Without packing no plan pays it: a state resumes as before.
  PlannerConfig off = cfg;
  off.packing = "off";
  write_profile("ps_plan.json", "");
  const uint64_t before = Planner(m, off).fingerprint();
  write_profile("ps_plan.json", R"(,"pack_sample_s":1.0)");
  EXPECT_EQ(Planner(m, off).fingerprint(), before);
  auto packs = [](const Plan& p) {
    size_t n = 0;
    for (const MicroBatch& mb : p.micro_batches) n += mb.bucket == kPackedBucket;
    return n;
  };
  // Without the term balanced packs here; at a second a sample of a pack, each pack costs
  // more than its samples apart, and balanced keeps its bucketed plan.
  ASSERT_GT(packs(pa), 0u);
  const Plan pb = b.plan("balanced");
  EXPECT_EQ(packs(pb), 0u);
  test::expect_plan_contract(b, pb, "balanced, packs priced a second a sample");
  EXPECT_GT(b.simulate(pa).epoch_time_s, b.simulate(pb).epoch_time_s);
}
