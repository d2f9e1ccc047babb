#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "adaptiveload/cost/calibration.h"
#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/rng.h"

using namespace adaptiveload;

namespace {
// Measurements from a known model with +-2% multiplicative noise.
std::vector<Measurement> synthetic(double a, double b, double c0, double ov, double nh,
                                   double noise) {
  Rng rng(5, 5);
  std::vector<Measurement> pts;
  for (int64_t S : {1560, 4680, 9360, 18564, 32760, 48000, 75600})
    for (int64_t B : {1, 2, 4}) {
      double t = a * S + b * double(S) * S + c0;
      double T = ov + t * (double(B) + nh / double(S));
      double u = (double(rng.below(2001)) / 1000.0 - 1.0) * noise;
      double mem = 30e9 + B * (1e8 + 170e3 * double(S));
      pts.push_back({S, B, T * (1 + u), mem});
    }
  return pts;
}
}  // namespace

TEST(Calibration, RecoversAKnownModel) {
  // Wan-1.3B-on-H200-like: 17.5 us per token linear, 1.94e-9 s per token^2 of attention.
  auto pts = synthetic(1.75e-5, 1.94e-9, 1.3e-3, 3e-3, 2048, 0.0);
  CalibrationFit f = fit_calibration(pts);
  EXPECT_LT(f.max_rel_error, 0.02);
  EXPECT_NEAR(f.a, 1.75e-5, 0.2e-5);
  EXPECT_NEAR(f.b, 1.94e-9, 0.1e-9);
  ASSERT_TRUE(f.has_memory);
  EXPECT_NEAR(f.static_bytes / 1e9, 30, 0.5);
  EXPECT_NEAR(f.m1, 170e3, 5e3);
  // The single exponent fits worse than a*S + b*S^2 + c0 on a curve with both terms.
  EXPECT_GT(f.power_max_rel_error, f.max_rel_error);
  EXPECT_GT(f.power_p, 1.0);
  EXPECT_LT(f.power_p, 2.0);
}

TEST(Calibration, NoisyMeasurementsReportTheirError) {
  auto pts = synthetic(1.75e-5, 1.94e-9, 1.3e-3, 3e-3, 2048, 0.05);
  CalibrationFit f = fit_calibration(pts);
  EXPECT_GT(f.max_rel_error, 0.0);
  EXPECT_LT(f.median_rel_error, 0.05);
  EXPECT_LT(f.max_rel_error, 0.12);
}

TEST(Calibration, HeldOutShapesAreErrorsOfPrediction) {
  // Fit on the S <= 32760 shapes, predict the two longest: with exact measurements the model
  // extrapolates them within rounding; with one held-out point 30% off, its error is that.
  auto pts = synthetic(1.75e-5, 1.94e-9, 1.3e-3, 3e-3, 2048, 0.0);
  std::vector<Measurement> fit, held;
  for (const Measurement& p : pts) (p.tokens <= 32760 ? fit : held).push_back(p);
  ASSERT_EQ(held.size(), 6u);
  CalibrationFit f = fit_calibration(fit);
  HeldOutErrors h = held_out_errors(f, held);
  EXPECT_EQ(h.points, 6u);
  EXPECT_LT(h.max_rel_error, 0.01);
  EXPECT_LE(h.median_rel_error, h.max_rel_error);
  for (const Measurement& p : held)
    EXPECT_NEAR(observation_time(f, {{{p.tokens, p.batch}}, p.time_s}), p.time_s, 0.01 * p.time_s);
  held[2].time_s *= 1.3;
  h = held_out_errors(f, held);
  EXPECT_NEAR(h.max_rel_error, 0.3 / 1.3, 0.01);
  EXPECT_LT(h.median_rel_error, 0.01);
  EXPECT_EQ(held_out_errors(f, {}).points, 0u);
  EXPECT_THROW(held_out_errors(f, {{100, 0, 0.1, -1}}), ConfigError);
}

TEST(Calibration, ProfileRoundTripsIntoTheProfileCostModel) {
  auto pts = synthetic(1.75e-5, 1.94e-9, 1.3e-3, 3e-3, 2048, 0.0);
  CalibrationFit f = fit_calibration(pts);
  const std::string path = ::testing::TempDir() + "profile.json";
  std::ofstream(path) << profile_json(f, pts, "wan2.1-1.3b", "h200");
  ProfileCost cost(path);
  ASSERT_TRUE(cost.has_memory());
  Bucket b;
  b.tokens = 32760;
  EXPECT_NEAR(cost.sample_time(b), f.a * 32760 + f.b * 32760.0 * 32760 + f.c0, 1e-12);
  EXPECT_NEAR(cost.microbatch_time(2, b), pts[13].time_s, 0.02 * pts[13].time_s);  // S=32760, B=2
}

TEST(Calibration, TooFewPointsOrBadFilesAreClearErrors) {
  std::vector<Measurement> two = {{1000, 1, 0.1, -1}, {2000, 1, 0.2, -1}, {2000, 2, 0.4, -1}};
  EXPECT_THROW(fit_calibration(two), ConfigError);
  const std::string path = ::testing::TempDir() + "bad_points.jsonl";
  std::ofstream(path) << "{\"tokens\":100,\"batch\":1,\"time_s\":0.1}\n{\"tokens\":\"x\"}\n";
  try {
    read_measurements(path);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad_points.jsonl:2"), std::string::npos) << e.what();
  }
  const std::string prof = ::testing::TempDir() + "not_profile.json";
  std::ofstream(prof) << "{\"format\":\"something-else\"}";
  EXPECT_THROW(ProfileCost{prof}, InputError);
}

TEST(Calibration, FitsPerRankStepSumsForOnlineAdaptation) {
  // Each observation is one rank's step: several micro-batches timed together.
  const double a = 1.75e-5, b = 1.94e-9, c0 = 1.3e-3, ov = 3e-3, nh = 2048;
  auto T = [&](double S, double B) { return ov + (a * S + b * S * S + c0) * (B + nh / S); };
  std::vector<Observation> obs;
  Rng rng(9, 9);
  const int64_t sizes[] = {1560, 9360, 18564, 32760, 75600};
  for (int i = 0; i < 40; ++i) {
    Observation o;
    const int n = 1 + int(rng.below(4));
    for (int k = 0; k < n; ++k) {
      int64_t S = sizes[rng.below(5)], B = 1 + int64_t(rng.below(3));
      o.micro_batches.push_back({S, B});
      o.time_s += T(double(S), double(B));
    }
    obs.push_back(o);
  }
  CalibrationFit f = fit_observations(obs);
  EXPECT_LT(f.max_rel_error, 0.02);
  EXPECT_NEAR(f.b, b, 0.1 * b);
  const std::string cost = cost_json(f);
  auto pc = ProfileCost::from_cost_json(cost);
  Bucket bk;
  bk.tokens = 32760;
  EXPECT_NEAR(pc->microbatch_time(2, bk), T(32760, 2), 0.02 * T(32760, 2));
}

TEST(Calibration, FitsObservationsOfPackedMicroBatches) {
  // Rank-steps of packs (samples of several token counts in one micro-batch) and bucketed
  // micro-batches: a pack costs overhead + sum_i B_i t(S_i) * (1 + N_half / N), N its tokens.
  const double a = 1.75e-5, b = 1.94e-9, c0 = 1.3e-3, ov = 3e-3, nh = 2048;
  auto t = [&](double S) { return a * S + b * S * S + c0; };
  std::vector<Observation> obs;
  Rng rng(5, 7);
  const int64_t sizes[] = {1560, 9360, 18564, 32760, 75600};
  for (int i = 0; i < 40; ++i) {
    Observation o;
    const int n = 1 + int(rng.below(3));
    for (int k = 0; k < n; ++k) {
      std::vector<std::pair<int64_t, int64_t>> parts;
      double w = 0, tokens = 0;
      const int kinds = 1 + int(rng.below(3));
      for (int q = 0; q < kinds; ++q) {
        const int64_t S = sizes[(i + 2 * q) % 5], B = 1 + int64_t(rng.below(3));
        parts.push_back({S, B});
        w += double(B) * t(double(S)), tokens += double(B) * double(S);
      }
      o.micro_batches.emplace_back(parts);
      o.time_s += parts.size() == 1 ? ov + t(double(parts[0].first)) * (double(parts[0].second) +
                                                                        nh / double(parts[0].first))
                                    : ov + w * (1 + nh / tokens);
    }
    obs.push_back(o);
  }
  CalibrationFit f = fit_observations(obs);
  EXPECT_LT(f.max_rel_error, 0.02);
  EXPECT_NEAR(f.b, b, 0.1 * b);
  // A pack is not the sum of its parts as separate micro-batches: pricing the same
  // observations as if every part were its own micro-batch fits worse.
  std::vector<Observation> split = obs;
  for (Observation& o : split) {
    std::vector<ObservedMicroBatch> mbs;
    for (const ObservedMicroBatch& mb : o.micro_batches)
      for (auto [S, B] : mb.parts) mbs.emplace_back(S, B);
    o.micro_batches = mbs;
  }
  EXPECT_GT(fit_observations(split).median_rel_error, f.median_rel_error);
  Observation empty_pack;
  empty_pack.micro_batches.emplace_back(std::vector<std::pair<int64_t, int64_t>>{});
  empty_pack.time_s = 1;
  obs.push_back(empty_pack);
  EXPECT_THROW(fit_observations(obs), ConfigError);
}
