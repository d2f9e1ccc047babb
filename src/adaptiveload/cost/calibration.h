#pragma once
// Calibration: fit the cost and memory models to measured micro-batches, and write the
// profile file that `plan --profile` and the sampler read (format in cost_variants.h).
//   time:   T(B, S) = overhead + t(S) * (B + N_half / S),  t(S) = a*S + b*S^2 + c0
//   memory: M(B, S) = M_static + B * (m0 + m1 * S)
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace adaptiveload {

struct Measurement {
  int64_t tokens = 0;      // S
  int64_t batch = 0;       // B
  double time_s = 0;       // forward + backward of the micro-batch
  double peak_bytes = -1;  // peak memory of the step; < 0 when not measured (CPU)
  bool held_out = false;   // measured to test the fit, not fitted ("held_out": true in JSONL)
};

struct CalibrationFit {
  double a = 0, b = 0, c0 = 0, overhead_s = 0, half_efficiency_tokens = 0;
  double pack_sample_s = 0;  // per sample of a pack of several shapes (fitted only on packs)
  bool has_memory = false;
  double static_bytes = 0, m0 = 0, m1 = 0;
  double power_k = 0, power_p = 0;  // best single exponent: seconds per sample = k * S^p
  double median_rel_error = 0, max_rel_error = 0;              // of T, this model
  double power_median_rel_error = 0, power_max_rel_error = 0;  // of T, k * S^p instead of t(S)
  size_t points = 0;
};

// One micro-batch of an observation by its shape: (tokens S_i, samples B_i) per bucket it
// holds; one part for a bucketed micro-batch, several for a pack, which the model prices as
// overhead + sum_i B_i t(S_i) * (1 + N_half / N) + n * pack_sample, N = sum_i B_i S_i and
// n = sum_i B_i (cost_model.h).
struct ObservedMicroBatch {
  std::vector<std::pair<int64_t, int64_t>> parts;
  ObservedMicroBatch(int64_t tokens, int64_t batch) : parts{{tokens, batch}} {}
  explicit ObservedMicroBatch(std::vector<std::pair<int64_t, int64_t>> p) : parts(std::move(p)) {}
};

// A measured span of work: the micro-batches one rank ran and their total seconds (one global
// step of one rank, as online adaptation gathers them).
struct Observation {
  std::vector<ObservedMicroBatch> micro_batches;
  double time_s = 0;
};

// Fits the time model to observations (each a sum of micro-batch times): the model is linear
// in (a, b, c0, overhead, pack_sample) for a given N_half, so sums (and packs) fit the same
// way single points do. pack_sample is fitted only where some observation holds a pack (else
// 0).
// Memory is not fitted (has_memory false). Throws ConfigError when under-determined.
// With `fixed_overhead_s` and `fixed_half_efficiency_tokens` >= 0, those two stay as given
// (online adaptation keeps the prior's, which a few steps cannot pin down); with
// `fixed_pack_sample_s` >= 0 that one does too.
CalibrationFit fit_observations(const std::vector<Observation>& obs, double fixed_overhead_s = -1,
                                double fixed_half_efficiency_tokens = -1,
                                double fixed_pack_sample_s = -1);

// The fitted model's seconds for an observation (its micro-batches' times summed; a pack
// priced as one micro-batch, as above).
double observation_time(const CalibrationFit& fit, const Observation& obs);
// The fit's relative errors on measurements it was not fitted on (shapes held out of the
// sweep): how well the model predicts, where the fit errors say how well it fits.
struct HeldOutErrors {
  size_t points = 0;
  double median_rel_error = 0, max_rel_error = 0;
};
// Throws ConfigError on a measurement without tokens, batch and time > 0.
HeldOutErrors held_out_errors(const CalibrationFit& fit, const std::vector<Measurement>& pts);
// The compact cost object of a fit, for PlanState::segment_costs.
std::string cost_json(const CalibrationFit& fit);

// Least squares on relative error with non-negative coefficients; N_half by a 1-D search.
// Throws ConfigError when the points cannot determine the model (fewer than 3 distinct S).
CalibrationFit fit_calibration(const std::vector<Measurement>& points);

// Reads measurements as JSONL lines {"tokens":S,"batch":B,"time_s":T,"peak_bytes":M}, with
// "held_out":true on those not to be fitted.
std::vector<Measurement> read_measurements(const std::string& path);

// The profile JSON (with the points, the fit errors, the held-out errors when `held` has
// points, and `meta` fields such as model/device).
std::string profile_json(const CalibrationFit& fit, const std::vector<Measurement>& points,
                         const std::string& model, const std::string& device,
                         const HeldOutErrors& held = {});

}  // namespace adaptiveload
