#pragma once
// The concrete cost models; callers go through make_cost_model() in cost_model.h.
#include <map>

#include "adaptiveload/cost/cost_model.h"

namespace adaptiveload {

class AnalyticCost : public CostModel {
 public:
  explicit AnalyticCost(const CostContext& ctx);
  std::string name() const override { return "analytic"; }
  double sample_time(const Bucket& b) const override;

 private:
  ModelPreset model_;
  bool checkpointing_;
  double flops_per_s_;
};

// The paper's single exponent: seconds per sample = k * S^p.
class PowerCost : public CostModel {
 public:
  PowerCost(double k, double p) : k_(k), p_(p) {}
  std::string name() const override { return "power"; }
  double sample_time(const Bucket& b) const override;
  double k() const { return k_; }
  double p() const { return p_; }

 private:
  double k_, p_;
};

// Read from a profile file written by `calibrate`: either fitted coefficients
// (seconds per sample = a*S + b*S^2 + c0) or a measured table of (tokens, seconds per sample)
// interpolated piecewise-linearly in S (linear extrapolation beyond the ends).
class ProfileCost : public CostModel {
 public:
  explicit ProfileCost(const std::string& path);
  // From a compact cost object {"a","b","c0","overhead_s","half_efficiency_tokens"[,
  // "pack_sample_s"]} (online adaptation's refit, as stored in a sampler state).
  static std::unique_ptr<ProfileCost> from_cost_json(const std::string& text);
  std::string name() const override { return "profile"; }
  double sample_time(const Bucket& b) const override;
  bool has_memory() const { return has_memory_; }
  const MemoryModel& memory() const { return memory_; }
  // Seconds of a global step beside its micro-batches and collectives (the profile's
  // "step": {"optimizer_s"}: the optimizer step, as `calibrate` measured it); 0 without one.
  double step_seconds() const { return step_s_; }
  // The ring all-reduce that `calibrate --allreduce-ranks N` measured between N processes on
  // this host (the profile's "link"): bus bytes per second and latency per hop, which replace
  // the device preset's in the planner's all-reduce, all-gathers and reduce-scatters (the
  // sequence-parallel all-to-all keeps the preset's). has_link() is false without one.
  bool has_link() const { return link_bus_bytes_per_s_ > 0; }
  double link_bus_bytes_per_s() const { return link_bus_bytes_per_s_; }
  double link_latency_s() const { return link_latency_s_; }
  // The bytes of the gradient all-reduce it timed (the model's own fp32 gradients; 0 when the
  // profile does not say): the step's all-reduce is priced on them, as measured.
  double link_gradient_bytes() const { return link_gradient_bytes_; }

 private:
  double a_ = 0, b_ = 0, c0_ = 0;
  std::vector<std::pair<double, double>> table_;  // (tokens, seconds per sample), ascending
  bool has_memory_ = false;
  MemoryModel memory_;
  double step_s_ = 0;
  double link_bus_bytes_per_s_ = 0, link_latency_s_ = 0, link_gradient_bytes_ = 0;
  ProfileCost() = default;
};

}  // namespace adaptiveload
