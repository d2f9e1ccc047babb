#pragma once
// Cost models: how long one micro-batch takes on one GPU (forward + backward), priced by its
// shape (shape.h: its samples by bucket). Every variant gives the marginal seconds per sample,
// sample_time(bucket); the micro-batch time adds a fixed launch overhead and the
// under-utilisation of small micro-batches. For B samples of one bucket of S tokens:
//   T(B, S) = overhead + sample_time * (B + N_half / S)
// i.e. efficiency ramps as N / (N + N_half) with N = B*S tokens in the micro-batch. For a
// shape of several buckets (a pack, each sample attending only to itself) the same model:
//   T = overhead + W * (1 + N_half / N) + n * pack_sample
// with W = sum_i sample_time(S_i), N = sum_i S_i and n its samples. A shape of one bucket is
// priced T(B, S) without it (cost() computes that case as such, so bucketed plans cost exactly
// what they cost before shapes). `pack_sample` is what the
// packed forward pays per sample beyond the batched forward's work (per-sample RoPE, text and
// timestep, attention run per segment): 0 unless a profile fitted on packs says so (`calibrate
// --packs N --fit-packs`).
// Variants (registry in cost_registry.cpp): "analytic" (FLOPs of the model preset),
// "power" (the paper's single exponent, k * S^p), "profile" (a*S + b*S^2 + c0 fitted by
// `calibrate`, or a measured table, read from a file).
#include <memory>
#include <string>
#include <vector>

#include "adaptiveload/cost/shape.h"
#include "adaptiveload/geometry/geometry.h"
#include "adaptiveload/plan/layout.h"
#include "adaptiveload/presets/presets.h"

namespace adaptiveload {

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string name() const = 0;
  // Seconds per sample of this bucket in a large micro-batch (no overhead, full efficiency).
  virtual double sample_time(const Bucket& b) const = 0;

  double microbatch_time(int64_t batch, const Bucket& b) const {
    if (batch <= 0) return 0;
    return overhead_s +
           sample_time(b) * (double(batch) + half_efficiency_tokens / double(b.tokens));
  }
  // Cost of adding `batch` more samples to an existing micro-batch of the same bucket.
  double marginal_time(int64_t batch, const Bucket& b) const {
    return sample_time(b) * double(batch);
  }

  // Seconds of a micro-batch of this shape (0 for an empty one); microbatch_time(B, b) for a
  // shape of one bucket.
  double cost(const MicroShape& s) const;
  // Its work at full efficiency, sum_i sample_time(S_i): cost() less the fixed costs
  // (overhead, the small-batch ramp, a pack's pack_sample_s).
  double work(const MicroShape& s) const;

  double overhead_s = 0;
  double half_efficiency_tokens = 0;
  // Seconds per sample of a pack of several shapes beyond its work (the formula above); a
  // micro-batch of one shape never pays it.
  double pack_sample_s = 0;
};

// A pack's seconds from its parts: `fixed` (the overhead, and on a group its all-to-all
// latency), its work at full efficiency, the ramp on its `tokens` (N_half per the group), and
// `pack_sample` for each of its `samples`. The one formula of CostModel::cost, group_cost and
// the calibration's observation_time for a shape of several buckets.
inline double pack_seconds(double fixed, double work, double half_tokens, double tokens,
                           double samples, double pack_sample) {
  return fixed + work * (1.0 + half_tokens / tokens) + pack_sample * samples;
}

// One micro-batch of `batch` samples of bucket b on a sequence-parallel group of g ranks, as
// every rank of the group sees it (docs/planner.md, "Sequence parallelism"):
//   T_g(B, S) = overhead + a2a latency + (t(S) / g + a2a(S, g)) * (B + N_half * g / S)
// the compute split g ways (heads in attention, tokens elsewhere), the all-to-alls of the
// Ulysses layers, and the small-batch ramp at the S / g tokens a rank holds: efficiency falls
// with g. g = 1 is microbatch_time exactly.
double group_microbatch_time(const CostModel& c, int64_t batch, const Bucket& b, int g,
                             const SeqParallel& sp);
// Its marginal seconds per sample, t(S) / g + a2a(S, g).
double group_sample_time(const CostModel& c, const Bucket& b, int g, const SeqParallel& sp);
// A micro-batch of any shape on a group of g ranks: overhead + a2a latency + W_g * (1 +
// N_half * g / N) (+ n * pack_sample for a pack of several shapes), W_g the sum of the samples'
// group_sample_time; group_microbatch_time for a shape of one bucket, c.cost(s) for g = 1.
double group_cost(const CostModel& c, const MicroShape& s, int g, const SeqParallel& sp);
// Its work at full efficiency on the group, sum_i group_sample_time(S_i).
double group_work(const CostModel& c, const MicroShape& s, int g, const SeqParallel& sp);

// A cost model as a group of g ranks sees it: microbatch_time(B, b) = group_microbatch_time
// of the base model. Lets a strategy plan W / g groups as if they were ranks.
class GroupCost : public CostModel {
 public:
  GroupCost(const CostModel& base, int g, const SeqParallel& sp);
  std::string name() const override { return base_.name(); }
  double sample_time(const Bucket& b) const override;

 private:
  const CostModel& base_;
  int g_;
  SeqParallel sp_;
};

// Most samples in one micro-batch (MicroBatch::count is 32-bit).
constexpr int64_t kMaxMicroBatch = int64_t(1) << 31;

// Memory of one micro-batch: M(B, S) = M_static + B * (m0 + m1 * S), bytes. Flash attention
// keeps activations linear in S.
struct MemoryModel {
  double static_bytes = 0;  // weights, gradients, optimizer state, runtime
  double m0 = 0;            // bytes per sample independent of length (text-token activations)
  double m1 = 0;            // bytes per video token
  double bytes(int64_t batch, int64_t tokens) const {
    return static_bytes + double(batch) * (m0 + m1 * double(tokens));
  }
  // Bytes of a micro-batch of any shape on each rank of a group of g (each sample's tokens
  // split g ways, rounded up): M_static + sum_i (m0 + m1 * ceil(S_i / g)); for one bucket
  // bytes(B, ceil(S / g)).
  double bytes(const MicroShape& s, int g = 1) const;
  // Largest B whose micro-batch fits in `usable_bytes` (0 when even one sample does not).
  int64_t max_batch(int64_t tokens, double usable_bytes) const;
};

struct Profile;  // profile.h: a calibrated profile, parsed once

struct CostContext {
  ModelPreset model;
  DevicePreset device;
  bool checkpointing = true;  // full activation checkpointing: recompute the forward once
  // The calibrated profile (parsed once by the planner, or an adapted cost object on resume);
  // null without one. A model that uses_profile needs it.
  std::shared_ptr<const Profile> profile;
};

// Forward+backward FLOPs of one sample of this bucket under the model preset (DESIGN.md
// formula: per block 8SD^2 + 4S^2D + cross 4SD^2 + 4LD^2 + 4SLD + FFN 4SDF; training 3x,
// attention core 3.5x; +1x forward with checkpointing).
double analytic_sample_flops(const ModelPreset& m, const Bucket& b, bool checkpointing);

// The memory model derived from a model preset. `shards` > 1: FSDP full sharding of weights,
// gradients and optimizer state over that many ranks (plus two gathered layers in bf16).
MemoryModel analytic_memory_model(const ModelPreset& m, bool checkpointing, int shards = 1);

// The cost-model registry (cost_registry.cpp), as the strategies' (strategy.h): name ->
// factory, the one list the option check (--cost-model, the sampler's cost_model), the CLI's
// help and the planner read. A new model is its class plus one registry line, or
// register_cost_model from outside the core (a test's, an out-of-tree model's).
using CostModelFactory = std::unique_ptr<CostModel> (*)(const CostContext& ctx,
                                                        const std::vector<Bucket>& buckets,
                                                        const std::vector<int64_t>& bucket_counts);
struct CostModelEntry {
  const char* name;
  const char* summary;
  CostModelFactory make;
  // Prices with the calibrated profile (CostContext::profile, needed): the planner then also
  // takes the profile's memory model, measured link and optimizer step.
  bool uses_profile = false;
};
// Built-in models first ("analytic", "power", "profile"), then the registered ones.
const std::vector<CostModelEntry>& cost_models();
const CostModelEntry& find_cost_model(
    const std::string& name);  // throws ConfigError naming the choices
// Adds a model after the built-in ones; throws ConfigError when the name is taken or empty.
// Call it before planning (the registry is not guarded against concurrent readers).
void register_cost_model(const CostModelEntry& entry);
// Removes a model added by register_cost_model; false when there is none of that name.
bool unregister_cost_model(const std::string& name);
// find_cost_model(name).make(ctx, ...): throws ConfigError for an unknown name, or a model
// that needs a profile without one.
std::unique_ptr<CostModel> make_cost_model(const std::string& name, const CostContext& ctx,
                                           const std::vector<Bucket>& buckets,
                                           const std::vector<int64_t>& bucket_counts);
std::vector<std::string> cost_model_names();  // in registry order

// Least-squares fit of t = k * S^p in log space over buckets, weighted by sample counts.
struct PowerFit {
  double k = 0, p = 1;
};
PowerFit fit_power(const CostModel& reference, const std::vector<Bucket>& buckets,
                   const std::vector<int64_t>& bucket_counts);

}  // namespace adaptiveload
