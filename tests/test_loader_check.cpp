// The loader check (sim/loader_check.h): a loader profile's rates priced over each rank's share
// of each step of a real plan, compared with the rank's simulated compute; the profile reader's
// refusals name the file and the field; the warning names the row, the rank, the step and the
// front end's option.
#include <gtest/gtest.h>

#include <cmath>

#include "adaptiveload/sim/loader_check.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "planner_fixture.h"

namespace adaptiveload {
namespace {

LoaderProfile profile(double fixed_s, double per_token_s, const std::string& buckets = "[]") {
  return parse_loader_profile(
      R"({"format": "adaptiveload-loader-1", "source": "media", "buckets": )" + buckets +
          R"(, "fit": {"fixed_s": )" + fmt("%.17g", fixed_s) + R"(, "per_token_s": )" +
          fmt("%.17g", per_token_s) + "}}",
      "lp.json");
}

struct Inputs {
  Manifest m = test::real_manifest();
  PlannerConfig cfg;
  explicit Inputs(const std::string& packing = "off") {
    cfg.world_size = 4;
    cfg.packing = packing;
  }
};

// The reference: per (step, rank), its samples' seconds (each sample's own bucket) over the
// workers, against the rank's compute (rank_times).
struct Reference {
  int64_t slow = 0, rank_steps = 0;
  double max_ratio = 0, total_load = 0;
};
Reference reference(const Planner& pl, const Plan& p, const LoaderProfile& lp, int workers) {
  Reference r;
  const SimEnv env = pl.sim_env(p.world_size);
  const std::vector<double> train = rank_times(p, env);
  for (size_t i = 0; i < train.size(); ++i) {
    if (p.rank_begin[i] == p.rank_begin[i + 1]) continue;
    double load = 0;
    for (uint64_t mbi = p.rank_begin[i]; mbi < p.rank_begin[i + 1]; ++mbi) {
      const MicroBatch& mb = p.micro_batches[mbi];
      for (uint32_t k = 0; k < mb.count; ++k)
        load +=
            lp.sample_seconds(pl.bucketing().buckets[pl.bucketing().sample_bucket[p.ids(mb)[k]]]);
    }
    load /= workers;
    r.total_load += load;
    ++r.rank_steps;
    r.slow += load > train[i];
    r.max_ratio = std::max(r.max_ratio, load / train[i]);
  }
  return r;
}

TEST(LoaderCheck, PricesEachRanksShareOfEachStepAgainstItsCompute) {
  for (const std::string packing : {"off", "on"}) {
    Inputs s(packing);
    Planner pl(s.m, s.cfg);
    const Plan p = pl.plan("balanced");
    EXPECT_EQ(p.packed, packing == "on");
    // Per-token rates: every bucket its own seconds, so a sample priced at another's bucket shows.
    const LoaderProfile lp = profile(0.01, 2e-6);
    for (int workers : {1, 3}) {
      const LoaderCheck c = check_loader(p, pl.sim_env(p.world_size), lp, workers);
      const Reference r = reference(pl, p, lp, workers);
      EXPECT_EQ(c.workers, workers);
      EXPECT_EQ(c.rank_steps, r.rank_steps) << packing;
      EXPECT_EQ(c.slow_rank_steps, r.slow) << packing << " workers " << workers;
      EXPECT_NEAR(c.max_ratio, r.max_ratio, 1e-12 * r.max_ratio) << packing;
      EXPECT_NEAR(c.worst_load_s / c.worst_train_s, c.max_ratio, 1e-9 * c.max_ratio);
      EXPECT_GT(c.load_s_max_rank,
                r.total_load / s.cfg.world_size * 0.999);  // the largest rank's >= the mean
    }
  }
}

TEST(LoaderCheck, WorkersDivideTheLoadAndTheWarningComesAndGoes) {
  Inputs s;
  Planner pl(s.m, s.cfg);
  const Plan p = pl.plan("balanced");
  const SimEnv env = pl.sim_env(p.world_size);
  // One sample takes longer than the slowest rank-step trains: slow with 1 worker everywhere.
  double longest = 0;
  for (double t : rank_times(p, env)) longest = std::max(longest, t);
  const LoaderProfile lp = profile(2 * longest, 0);
  const LoaderCheck one = check_loader(p, env, lp, 1);
  EXPECT_EQ(one.slow_rank_steps, one.rank_steps);
  EXPECT_FALSE(one.keeps_up());
  const LoaderCheck many = check_loader(p, env, lp, 1000);
  EXPECT_NEAR(many.max_ratio * 1000, one.max_ratio, 1e-9 * one.max_ratio);
  const std::string w = loader_warning("balanced", one, lp, "--loader-workers");
  EXPECT_NE(w.find("strategy 'balanced': the loader would not keep up"), std::string::npos) << w;
  EXPECT_NE(w.find("rank " + std::to_string(one.worst_rank) + "'s share of step " +
                   std::to_string(one.worst_step)),
            std::string::npos)
      << w;
  EXPECT_NE(w.find("with 1 worker(s) per rank"), std::string::npos) << w;
  EXPECT_NE(w.find("raise --loader-workers"), std::string::npos) << w;
  EXPECT_NE(w.find("lp.json"), std::string::npos) << w;
  // A loader far faster than training: no warning.
  const LoaderCheck fast = check_loader(p, env, profile(1e-9, 0), 1);
  EXPECT_TRUE(fast.keeps_up());
  EXPECT_LT(fast.max_ratio, 1);
  EXPECT_EQ(loader_warning("balanced", fast, lp, "--loader-workers"), "");
  EXPECT_THROW(check_loader(p, env, lp, 0), ConfigError);
}

TEST(LoaderCheck, MeasuredBucketsTakePrecedenceOverTheFit) {
  Bucket b;
  b.frames = 81, b.height = 480, b.width = 832, b.tokens = 32760;
  const LoaderProfile lp = profile(
      0.5, 1e-3, R"([{"frames": 81, "height": 480, "width": 832, "seconds": 0.25, "samples": 3}])");
  EXPECT_DOUBLE_EQ(lp.sample_seconds(b), 0.25);
  b.width = 848;  // not measured: the fit
  EXPECT_DOUBLE_EQ(lp.sample_seconds(b), 0.5 + 1e-3 * 32760);
}

TEST(LoaderCheck, ProfileRefusalsNameTheFileAndTheField) {
  auto message = [](const std::string& text) {
    try {
      parse_loader_profile(text, "lp.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("{").find("lp.json: loader profile is not valid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"a_min": 1})").find("not a loader profile"), std::string::npos);
  const std::string head = R"({"format": "adaptiveload-loader-1", )";
  EXPECT_NE(message(head + R"("buckets": []})").find("has no 'fit'"), std::string::npos);
  EXPECT_NE(message(head + R"("buckets": [], "fit": {"fixed_s": -1, "per_token_s": 0}})")
                .find("'fit.fixed_s' must be "
                      "finite and >= 0"),
            std::string::npos);
  EXPECT_NE(message(head + R"("fit": {"fixed_s": 0, "per_token_s": 0}})").find("no 'buckets' list"),
            std::string::npos);
  EXPECT_NE(
      message(head +
              R"("fit": {"fixed_s": 0, "per_token_s": 0}, "buckets": [{"frames": 0, "height": 8,
            "width": 8, "seconds": 1}]})")
          .find("'buckets[0].frames' must be a whole number >= 1"),
      std::string::npos);
  EXPECT_NE(
      message(head +
              R"("fit": {"fixed_s": 0, "per_token_s": 0}, "buckets": [{"frames": 1, "height": 8,
            "width": 8, "seconds": "x"}]})")
          .find("'buckets[0].seconds' must be a number"),
      std::string::npos);
  EXPECT_THROW(read_loader_profile("/nonexistent/lp.json"), InputError);
}

}  // namespace
}  // namespace adaptiveload
