#pragma once
// The planner: manifest + configuration -> buckets, cost and memory models, resolved budgets,
// and for each strategy a plan and its simulated metrics. A plan is a pure function of
// (manifest, config, seed, epoch, world size).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/cost/profile.h"
#include "adaptiveload/geometry/geometry.h"
#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/plan/plan.h"
#include "adaptiveload/plan/state.h"
#include "adaptiveload/planner/config.h"
#include "adaptiveload/planner/ranks.h"
#include "adaptiveload/presets/presets.h"
#include "adaptiveload/sim/metrics.h"
#include "adaptiveload/strategy/context.h"
#include "adaptiveload/strategy/group_search.h"
#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

struct OversizeSample {
  int64_t row;
  std::string message;
};

// Samples a strategy drops at the epoch's end (end_policy drop) beyond this share of the
// `planned` ones are said: "strategy 'x' drops N of M samples (P%) at the epoch's end (...)";
// "" when it drops fewer. `trains_nothing`: the plan has no trained sample left.
constexpr double kDropWarnFraction = 0.01;
std::string drop_warning(const std::string& strategy, int64_t dropped, int64_t planned,
                         bool trains_nothing);

class Planner {
 public:
  // Resolves presets, buckets every usable row, checks oversize samples and resolves budgets.
  // Throws ConfigError / InputError with a message for the user: an option out of range, a
  // budget or cost that is not finite, or nothing to plan (no usable, fitting row).
  Planner(const Manifest& manifest, const PlannerConfig& config);
  // From samples already bucketed (synthetic data, benchmarks); its buckets are the truth and
  // the grid preset is only recorded.
  Planner(Bucketing bucketing, const PlannerConfig& config);

  const PlannerConfig& config() const { return cfg_; }
  const PlanOptions& options() const { return opt_; }
  const ModelPreset& model() const { return model_; }
  // The device the cost model and the budgets are priced on: --device, or with --devices the
  // ranks' device of least memory (planner/ranks.h).
  const DevicePreset& device() const { return device_; }
  // Ranks that are not alike (--devices, --rank-speed): each rank's device and speed; empty
  // when every rank is device().
  const RankDevices& ranks() const { return ranks_; }
  const BucketGrid& grid() const { return grid_; }
  const Bucketing& bucketing() const { return bucketing_; }
  const CostModel& cost() const { return *cost_; }
  // The calibrated profile (PlannerConfig::profile), read once: null without one. The cost
  // model prices with it where it uses_profile (cost registry), and then its memory model,
  // measured link and optimizer step apply too; the report plots its points.
  const Profile* profile() const { return profile_.get(); }
  const MemoryModel& memory() const { return memory_; }
  bool sharded() const { return sharded_; }
  const std::vector<OversizeSample>& oversize() const { return oversize_; }
  double usable_memory_bytes() const;
  int64_t mem_budget_tokens() const { return base_.mem_budget_tokens; }
  double comp_budget() const { return base_.comp_budget; }
  double p() const { return base_.p; }
  double step_budget_s() const { return base_.step_budget_s; }
  SyncMode sync() const { return sync_; }
  // Seconds every global step spends once beside its micro-batches and collectives on
  // world_size ranks (0: the configured), the optimizer step: a calibrated profile's "step",
  // over W when the model is sharded (each rank steps its shard); 0 without one.
  double step_fixed_s(int world_size = 0) const;
  BatchKind batch_kind() const { return base_.batch_kind; }
  double batch_target() const { return base_.batch_target; }
  // "steps:113 (auto: equal_tokens)" and the like, for tables and reports.
  std::string global_batch_text() const;
  // Sequence parallelism on `world_size` ranks (0: the configured one): the allowed sizes and
  // all-to-all costs, and each bucket's group size (1 where sp is off).
  SeqParallel seq_parallel(int world_size = 0) const;
  const std::vector<uint8_t>& bucket_groups() const { return base_.bucket_group; }
  // Largest group size any planned sample gets (1: no sequence parallelism).
  int max_group() const;
  // --sp per-sample where a group larger than 1 is allowed on `world_size` ranks (0: the
  // configured): balanced tries groups though every sample fits one GPU.
  bool per_sample_groups(int world_size = 0) const;
  // Sequence-parallel groups in use: a sample needs one (max_group() > 1) or per_sample_groups().
  // Packing is refused then; the table adds balanced on each fixed group size.
  bool groups_in_use() const;
  // The plan with every sample on `g` ranks (one fixed group size), for comparison.
  Plan plan_fixed_group(const std::string& strategy, int g, int world_size = 0) const;
  uint64_t fingerprint() const { return fingerprint_; }
  // Why `fixed` cannot run (its batch sizes miss a bucket), "" when it can.
  const std::string& fixed_error() const { return fixed_error_; }
  // Why strategy s cannot plan these inputs ("" when it can): `fixed` without batch sizes for
  // a bucket, a packer (or balanced with --packing on) where samples need a sequence-parallel
  // group. A comparison leaves such a strategy out and says why.
  std::string cannot_plan(const StrategyEntry& s) const;
  // Candidates tried by the automatic M_comp search and their simulated throughput.
  const std::vector<std::pair<double, double>>& comp_search() const { return comp_search_; }

  // The full-epoch plan of a strategy for `world_size` ranks (0: the configured one) and
  // `epoch` (-1: the configured one). Budgets do not depend on the epoch.
  Plan plan(const std::string& strategy, int world_size = 0, int64_t epoch = -1) const;
  // With --packing on, the plan of a strategy that packs when asked (balanced) without
  // packing: its bucketed plan, for comparison. plan() otherwise.
  Plan plan_bucketed(const std::string& strategy) const;
  bool packing() const { return opt_.packing; }
  Metrics simulate(const Plan& plan) const;
  // Global steps the global batch asks for on `world_size` ranks (0: the configured one), for
  // the full epoch; 0 when it is free.
  uint64_t target_steps(int world_size = 0) const;
  // Targets `plan` (a full-epoch plan of this planner) misses, one sentence each for the user:
  // the global batch's step count, and for balanced in step sync the per-step global batch
  // (within 10%) and the mix (images and clips in every step). Empty when it meets them all.
  // Also a global batch larger than the whole epoch (batch_over_epoch). Each line names the
  // strategy; row_warnings names it `row` instead (a table row: "balanced bucketed").
  std::vector<std::string> warnings(const Plan& plan) const;
  // The sentence for `plan` when it drops more than kDropWarnFraction of the samples planned
  // (end_policy drop; every front end says it, in its own words); "" when it drops fewer.
  std::string drop_warning(const Plan& plan) const;
  std::vector<std::string> row_warnings(const Plan& plan, const std::string& row) const;
  // "" or why the global batch (samples:N, tokens:N) exceeds what the whole epoch holds: the
  // plan is then one step of every sample, never a silent cap.
  std::string batch_over_epoch() const;
  SimEnv sim_env(int world_size) const;

  // Resume: the plan to continue from `state` on `world_size` ranks, and the first step of it
  // still to run. Throws InputError when the state belongs to another manifest, config,
  // strategy or seed. The returned state is the one to save from here on.
  struct Resumed {
    Plan plan;
    size_t first_step = 0;
    PlanState state;
  };
  // `new_cost` (online adaptation): a compact cost object (see PlanState::segment_costs) to
  // plan the rest of the epoch with from here on, as a new segment. `new_speeds`: speed factors
  // learned online (cost/speed_learning.h), one per rank, multiplying the configured speeds from
  // here on (all 1: back to the configured speeds); empty keeps the latest (PlanState::
  // segment_speeds). Throws InputError unless it holds one factor per rank, each in (0, 100].
  Resumed resume(const PlanState& state, int world_size, const std::string& new_cost = "",
                 const std::vector<double>& new_speeds = {}) const;
  // The configured speed of each rank (--devices, --rank-speed), 1 for alike ranks.
  std::vector<double> configured_speeds(int world_size) const;
  // State at the start of `epoch` on `world_size` ranks (0 / -1: the configured ones).
  PlanState initial_state(const std::string& strategy, int world_size = 0,
                          int64_t epoch = -1) const;

 private:
  // Every planned sample fits one GPU (a group of 1) within the memory budget.
  bool fit_one_gpu() const;
  void init(Bucketing bucketing, const Manifest* manifest);
  // Oversize samples reported (or thrown, per cfg_.oversize) and the rest into pool_; returns
  // which buckets are too big. oversize.cpp.
  std::vector<uint8_t> fill_pool(const Manifest* manifest, const std::vector<uint8_t>& group,
                                 const std::vector<int64_t>& max_mem);
  uint64_t compute_fingerprint(const Manifest* manifest) const;  // fingerprint.cpp
  PlanProblem problem(int world_size, int64_t epoch, uint64_t segment,
                      std::vector<uint32_t> pool) const;
  void resolve_budgets();
  void resolve_global_batch();
  ParallelLayout layout(int world_size) const;
  double auto_step_budget(const CostModel& cost) const;
  std::vector<int64_t> resolve_fixed(std::string& error) const;
  // Every strategy the same way: drive(s, pr, context) (strategy/context.h). `may_pack`: with
  // --packing on, a strategy that packs when asked packs (plan_bucketed: not).
  Plan run(const StrategyEntry& s, const PlanProblem& pr, bool may_pack = true) const;
  // Per bucket on `world_size` ranks: the group size (fixed_g > 0: that one, else the smallest
  // allowed that fits) and the largest batch that fits memory on it (0: none fits).
  // Largest batch of bucket b that fits memory on a group of g (S / g tokens a GPU), 0 when
  // none does or S / g exceeds the configured token budget.
  int64_t max_batch_on(size_t b, int g) const;
  void choose_groups(int world_size, int fixed_g, std::vector<uint8_t>& group,
                     std::vector<int64_t>& max_mem) const;
  // What balanced's group searches (strategy/group_search.h) read of this planner.
  GroupSearch group_search(int world_size) const;
  // The problem with every sample on g ranks, as W / g ranks that each are one group.
  // `group_cost`: the cost model on g ranks (GroupCost of pr.cost), or null where no
  // strategy runs on the result (budgets only).
  PlanProblem as_groups(const PlanProblem& pr, int g, const CostModel* group_cost) const;
  Plan run_on_groups(const StrategyEntry& s, const PlanProblem& pr, int g) const;
  // What every strategy gets beside its problem on `world_size` ranks (0: the configured):
  // this planner's services and options (strategy/context.h). `may_pack`: as for run().
  PlanContext context(int world_size, bool may_pack) const;
  PlannerConfig cfg_;
  PlanOptions opt_;  // cfg_'s option words as types (resolve_options)
  ModelPreset model_;
  DevicePreset device_;
  double collective_params_ =
      0;  // parameters the collectives move: the preset's, or a measured link's gradients
  BucketGrid grid_;
  Bucketing bucketing_;
  std::unique_ptr<CostModel> cost_;
  std::shared_ptr<const Profile> profile_;      // cfg_.profile, parsed once (null: none)
  const CostModelEntry* cost_entry_ = nullptr;  // cfg_.cost_model in the cost registry
  // The profile the cost model prices with (its memory, link and step apply), else null.
  const Profile* priced_profile() const {
    return cost_entry_->uses_profile ? profile_.get() : nullptr;
  }
  // The cost model of a compact cost object (online adaptation's refit, resume).
  std::unique_ptr<CostModel> adapted_cost(const std::string& cost_json) const;
  MemoryModel memory_;
  std::vector<OversizeSample> oversize_;
  std::vector<uint32_t> pool_;  // usable, in-budget sample ids, ascending
  PlanProblem base_;            // budgets resolved; pool and world size filled per call
  RankDevices ranks_;           // --devices, --rank-speed (empty: alike ranks)
  void resolve_rank_devices();
  uint64_t fingerprint_ = 0;
  std::vector<std::pair<double, double>> comp_search_;
  std::string fixed_error_;
  bool sharded_ = false;  // why `fixed` cannot run, when its table misses a bucket
  SyncMode sync_ = SyncMode::kStep;
  std::string global_batch_text_;
  std::vector<uint8_t> live_;  // per bucket: samples of it in the pool
};

}  // namespace adaptiveload
