#pragma once
// The concrete cost models; callers go through the registry (make_cost_model, cost_model.h).
#include <map>
#include <memory>
#include <string>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/cost/profile.h"

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

// A calibrated profile (profile.h, parsed once): either fitted coefficients (seconds per
// sample = a*S + b*S^2 + c0) or a measured table of (tokens, seconds per sample) interpolated
// piecewise-linearly in S (linear extrapolation beyond the ends).
class ProfileCost : public CostModel {
 public:
  explicit ProfileCost(std::shared_ptr<const Profile> profile);
  // Reads the file (load_profile): a ProfileCost of its own (tests, tools).
  explicit ProfileCost(const std::string& path);
  // From a compact cost object (profile_from_cost_json).
  static std::unique_ptr<ProfileCost> from_cost_json(const std::string& text);
  std::string name() const override { return "profile"; }
  double sample_time(const Bucket& b) const override;
  const Profile& profile() const { return *profile_; }
  bool has_memory() const { return profile_->has_memory; }
  const MemoryModel& memory() const { return profile_->memory; }
  // Seconds of a global step beside its micro-batches and collectives (the profile's
  // "step": {"optimizer_s"}: the optimizer step, as `calibrate` measured it); 0 without one.
  double step_seconds() const { return profile_->step_s; }
  // The ring all-reduce that `calibrate --allreduce-ranks N` measured between N processes on
  // this host (the profile's "link"): bus bytes per second and latency per hop, which replace
  // the device preset's in the planner's all-reduce, all-gathers and reduce-scatters (the
  // sequence-parallel all-to-all keeps the preset's). has_link() is false without one.
  bool has_link() const { return profile_->has_link(); }
  double link_bus_bytes_per_s() const { return profile_->link_bus_bytes_per_s; }
  double link_latency_s() const { return profile_->link_latency_s; }
  // The bytes of the gradient all-reduce it timed (the model's own fp32 gradients; 0 when the
  // profile does not say): the step's all-reduce is priced on them, as measured.
  double link_gradient_bytes() const { return profile_->link_gradient_bytes; }

 private:
  std::shared_ptr<const Profile> profile_;
};

}  // namespace adaptiveload
