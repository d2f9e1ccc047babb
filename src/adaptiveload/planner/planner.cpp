#include "adaptiveload/planner/planner.h"

#include <algorithm>
#include <cmath>

#include "adaptiveload/strategy/group_search.h"
#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {

double Planner::usable_memory_bytes() const {
  return device_.memory_bytes * (1.0 - device_.memory_reserve_fraction);
}

Planner::Planner(const Manifest& manifest, const PlannerConfig& config) : cfg_(config) {
  opt_ = resolve_options(cfg_);
  model_ = load_model(cfg_.model);
  device_ = load_device(cfg_.device);
  resolve_rank_devices();
  grid_ = load_grid(cfg_.grid);
  init(assign_buckets(manifest, grid_, model_), &manifest);
}

Planner::Planner(Bucketing bucketing, const PlannerConfig& config) : cfg_(config) {
  opt_ = resolve_options(cfg_);
  model_ = load_model(cfg_.model);
  device_ = load_device(cfg_.device);
  resolve_rank_devices();
  grid_ = load_grid(cfg_.grid);
  init(std::move(bucketing), nullptr);
}

void Planner::init(Bucketing bucketing, const Manifest* manifest) {
  bucketing_ = std::move(bucketing);
  const auto& buckets = bucketing_.buckets;
  cost_entry_ = &find_cost_model(cfg_.cost_model);
  if (!cfg_.profile.empty()) profile_ = std::make_shared<const Profile>(load_profile(cfg_.profile));
  cost_ = cost_entry_->make(CostContext{model_, device_, cfg_.checkpointing, profile_}, buckets,
                            bucketing_.bucket_counts);
  const double usable = usable_memory_bytes();
  sharded_ = opt_.sharding == Sharding::kFsdp ||
             (opt_.sharding == Sharding::kAuto && cfg_.world_size > 1 &&
              analytic_memory_model(model_, cfg_.checkpointing).static_bytes > 0.5 * usable);
  memory_ = analytic_memory_model(model_, cfg_.checkpointing, sharded_ ? cfg_.world_size : 1);
  collective_params_ = model_.params;
  if (const Profile* prof = priced_profile()) {
    if (prof->has_memory) memory_ = prof->memory;
    if (prof->has_link()) {
      // The all-reduce measured on this host prices the collectives in place of the preset's,
      // moving the bytes of the gradients it timed where it records them (the model calibrated).
      device_.allreduce_bus_bytes_per_s = prof->link_bus_bytes_per_s;
      device_.allreduce_latency_s = prof->link_latency_s;
      if (prof->link_gradient_bytes > 0) collective_params_ = prof->link_gradient_bytes / 4.0;
    }
  }
  for (const auto& [v, what] :
       {std::pair{memory_.static_bytes, "static bytes"}, {memory_.m0, "m0"}, {memory_.m1, "m1"}})
    check_finite(v, std::string("memory model ") + what);
  if (memory_.static_bytes >= usable) {
    // Advice that applies: sharding over more ranks helps only once there are several.
    std::string advice;
    if (!sharded_ && cfg_.world_size > 1)
      advice = "use " + option_word("sharding", "fsdp") + " (shards it over the " +
               std::to_string(cfg_.world_size) + " GPUs) or a larger device";
    else if (!sharded_)
      advice = "use " + option_word("sharding", "fsdp") + " with more GPUs (" +
               option_word("world_size", Spelling::kShort) + "), or a larger device";
    else
      advice = "use more GPUs (it is sharded over " + std::to_string(cfg_.world_size) +
               ") or a larger device";
    throw ConfigError("the model state of " + model_.name +
                      " (weights, gradients, optimizer) needs " + fmt_gb(memory_.static_bytes) +
                      " per GPU, more than the " + fmt_gb(usable) + " usable on " + device_.name +
                      "; " + advice);
  }
  // The cost of every bucket must be a usable number of seconds (a profile or preset at the
  // edge of its range could still overflow it).
  for (const Bucket& b : buckets) {
    const double t = cost_->sample_time(b), mb = cost_->cost(MicroShape::uniform(1, b));
    check_finite(t, "cost model '" + cost_->name() + "': seconds per sample of bucket " + b.name());
    check_finite(
        mb, "cost model '" + cost_->name() + "': seconds of one micro-batch of bucket " + b.name());
    if (!(t > 0) || mb > kMaxSampleSeconds)
      throw ConfigError("cost model '" + cost_->name() + "' gives " + fmt("%g", mb) +
                        " s for one sample of bucket " + b.name() +
                        "; it must be in (0, 1e9] s: check the model, device or profile");
  }

  // Sequence parallelism: the allowed group sizes and the cost model on each.
  {
    const SeqParallel sp = seq_parallel(cfg_.world_size);
    if (opt_.sp_group > 1 && !sp.allows(opt_.sp_group))
      throw ConfigError("sequence-parallel group size " + std::to_string(opt_.sp_group) + " (" +
                        option_word("sp") + ") cannot be used on " +
                        std::to_string(cfg_.world_size) + " ranks of " + device_.name + " with " +
                        model_.name + ": a group size must divide the world size and the model's " +
                        std::to_string(model_.heads) + " heads, and be at most the node size " +
                        std::to_string(device_.node_size));
  }

  // Oversize samples: one alone exceeds device memory (on every allowed group size) or the
  // token budget.
  std::vector<int64_t> max_mem;
  std::vector<uint8_t> group;
  choose_groups(cfg_.world_size, opt_.sp_group, group, max_mem);
  const std::vector<uint8_t> too_big = fill_pool(manifest, group, max_mem);

  base_.buckets = &bucketing_.buckets;
  base_.sample_bucket = &bucketing_.sample_bucket;
  base_.cost = cost_.get();
  base_.seed = cfg_.seed;
  base_.epoch = cfg_.epoch;
  base_.end_policy = cfg_.end_policy;
  base_.max_batch_memory = max_mem;
  // Groups only for the buckets planned: a skipped oversize one keeps no group.
  live_ = live_buckets(pool_, bucketing_.sample_bucket, buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b)
    if (!live_[b] || too_big[b]) group[b] = 1;
  set_bucket_groups(base_, group);
  base_.fixed_batch = resolve_fixed(fixed_error_);
  sync_ = opt_.sync.value_or(auto_sync_mode(sharded_));
  base_.layout = layout(cfg_.world_size);
  base_.allreduce_s = sim_env(cfg_.world_size).allreduce_s;
  base_.memory = memory_;
  base_.usable_bytes = usable;
  resolve_budgets();

  fingerprint_ = compute_fingerprint(manifest);
}

ParallelLayout Planner::layout(int world_size) const {
  ParallelLayout l =
      parallel_layout(sync_, world_size, seq_parallel(world_size), collective_params_, device_,
                      sharded_, cfg_.reshard_after_forward, cfg_.collective_overlap);
  l.step_fixed_s = step_fixed_s(world_size);
  if (!ranks_.empty()) {
    if (world_size != cfg_.world_size)
      throw ConfigError("the ranks' devices and speeds (" + option_word("devices") + ", " +
                        option_word("rank_speed") + ") are given for " +
                        std::to_string(cfg_.world_size) + " ranks, not " +
                        std::to_string(world_size) + "; give them again for the new world size");
    l.rank_speed = ranks_.speed;
    l.device_speed = ranks_.device_speed;
  }
  return l;
}

void Planner::resolve_rank_devices() {
  ranks_ = resolve_ranks(cfg_.devices, cfg_.rank_speed, cfg_.world_size, device_);
  if (!cfg_.devices.empty()) device_ = ranks_.device[ranks_.reference];
}

double Planner::step_fixed_s(int world_size) const {
  const Profile* prof = priced_profile();
  if (!prof) return 0.0;
  // Sharded (FSDP, ZeRO-2/3), each rank steps the optimizer over its 1 / W of the parameters.
  const int W = world_size > 0 ? world_size : cfg_.world_size;
  return sharded_ ? prof->step_s / double(W) : prof->step_s;
}

std::unique_ptr<CostModel> Planner::adapted_cost(const std::string& cost_json) const {
  // A refit is a profile's coefficients: priced by the registry's profile model.
  auto refit = std::make_shared<const Profile>(profile_from_cost_json(cost_json));
  return make_cost_model("profile", CostContext{model_, device_, cfg_.checkpointing, refit},
                         bucketing_.buckets, bucketing_.bucket_counts);
}

PlanProblem Planner::problem(int world_size, int64_t epoch, uint64_t segment,
                             std::vector<uint32_t> pool) const {
  PlanProblem pr = base_;
  pr.epoch = epoch;
  pr.world_size = world_size > 0 ? world_size : cfg_.world_size;
  pr.layout = layout(pr.world_size);
  pr.allreduce_s = pr.layout.step_sync_s;
  pr.segment = segment;
  pr.pool = std::move(pool);
  if (!cfg_.devices.empty())
    for (size_t r = 0; r < ranks_.device.size(); ++r)
      pr.rank_usable_bytes.push_back(ranks_.usable_bytes(r));
  if (pr.world_size != cfg_.world_size && opt_.sp_sizes != 1) {
    // Another world size (elastic resume) allows other group sizes: choose them again.
    std::vector<uint8_t> group;
    choose_groups(pr.world_size, opt_.sp_group, group, pr.max_batch_memory);
    for (size_t b = 0; b < group.size(); ++b)
      if (pr.max_batch_memory[b] < 1 && live_[b])
        throw ConfigError("on " + std::to_string(pr.world_size) +
                          " ranks no allowed sequence-parallel group size fits "
                          "a sample of bucket " +
                          bucketing_.buckets[b].name() + " (it needed a group of " +
                          std::to_string(base_.group(uint16_t(b))) + " on " +
                          std::to_string(cfg_.world_size) +
                          "); resume on a world size that the group sizes (" +
                          option_word("sp_sizes") + ") divide");
    for (size_t b = 0; b < group.size(); ++b)
      if (!live_[b]) group[b] = 1;
    set_bucket_groups(pr, group);
  }
  return pr;
}

SeqParallel Planner::seq_parallel(int world_size) const {
  const int W = world_size > 0 ? world_size : cfg_.world_size;
  SeqParallel sp;
  for (int k = 1; (1 << k) <= kMaxGroup; ++k) {
    const int g = 1 << k;
    if ((opt_.sp_sizes >> k & 1u) && g <= device_.node_size && W % g == 0 && model_.heads % g == 0)
      sp.sizes |= 1u << k;
  }
  // Ulysses (DeepSpeed-Ulysses, Jacobs et al. 2023): around every self-attention, all-to-alls
  // of q, k, v (sequence -> heads) and of the output (heads -> sequence), each rank sending
  // (g - 1) / g of its S / g x D bf16 values; in forward, in backward (their gradients) and
  // again in the recomputed forward under checkpointing: 4 x (2 + ckpt) per layer.
  const double per_layer = 4.0 * (2 + (cfg_.checkpointing ? 1 : 0));
  const double a2a = per_layer * double(model_.layers);
  sp.a2a_s_per_token = a2a * 2.0 * double(model_.dim) / device_.alltoall_bytes_per_s;
  sp.a2a_latency_s = a2a * device_.alltoall_latency_s;
  return sp;
}

int64_t Planner::max_batch_on(size_t b, int g) const {
  const int64_t per_gpu = (bucketing_.buckets[b].tokens + g - 1) / g;
  if (cfg_.mem_budget_tokens > 0 && per_gpu > cfg_.mem_budget_tokens) return 0;
  return memory_.max_batch(per_gpu, usable_memory_bytes());
}

void Planner::choose_groups(int world_size, int fixed_g, std::vector<uint8_t>& group,
                            std::vector<int64_t>& max_mem) const {
  const auto& buckets = bucketing_.buckets;
  const SeqParallel sp = seq_parallel(world_size);
  group.assign(buckets.size(), 1);
  max_mem.assign(buckets.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (int g = fixed_g > 0 ? fixed_g : 1; g <= kMaxGroup; g *= 2) {
      if (g > 1 && !sp.allows(g)) {
        if (fixed_g > 0) break;
        continue;
      }
      group[b] = uint8_t(g);
      max_mem[b] = max_batch_on(b, g);  // 0: fits no allowed group (memory or the token budget)
      if (max_mem[b] >= 1 || fixed_g > 0) break;
    }
  }
}

int Planner::max_group() const {
  int g = 1;
  for (size_t b = 0; b < base_.bucket_group.size(); ++b)
    if (live_[b]) g = std::max(g, int(base_.bucket_group[b]));
  return g;
}

bool Planner::per_sample_groups(int world_size) const {
  return opt_.sp == SpPolicy::kPerSample && seq_parallel(world_size).sizes != 1;
}

bool Planner::fit_one_gpu() const {
  for (size_t b = 0; b < live_.size(); ++b)
    if (live_[b] && max_batch_on(b, 1) < 1) return false;
  return true;
}

bool Planner::groups_in_use() const { return max_group() > 1 || per_sample_groups(); }

GroupSearch Planner::group_search(int world_size) const {
  GroupSearch gs;
  gs.buckets = &bucketing_.buckets;
  gs.sp = seq_parallel(world_size);
  gs.max_batch_on = [this](size_t b, int g) { return max_batch_on(b, g); };
  gs.env = sim_env(world_size);
  gs.fixed_error = fixed_error_;
  return gs;
}

PlanProblem Planner::as_groups(const PlanProblem& pr, int g, const CostModel* group_cost) const {
  return adaptiveload::as_groups(group_search(pr.world_size), pr, g, group_cost);
}

Plan Planner::run_on_groups(const StrategyEntry& s, const PlanProblem& pr, int g) const {
  return adaptiveload::run_on_groups(group_search(pr.world_size), s, pr, g);
}

namespace {
// Why packing cannot plan with sequence-parallel groups: samples that do not fit one GPU, or
// (when they all fit) the option that asked for groups, --sp G or --sp per-sample.
std::string packing_with_groups(const StrategyEntry& s, const PlanOptions& o, bool fit_one_gpu) {
  const std::string packing = "packing (" + std::string(s.name) + ", " +
                              option_word("packing", "on") + ") plans every sample on one GPU";
  if (!fit_one_gpu || (o.sp != SpPolicy::kFixed && o.sp != SpPolicy::kPerSample))
    return packing +
           ", but samples here need a sequence-parallel group (they do not fit one GPU); use " +
           option_word("packing", "off") + ", or a device or " + option_word("mem_budget_tokens") +
           " they fit";
  const std::string sp = option_word("sp", sp_policy_text(o));
  const std::string every = o.sp == SpPolicy::kFixed
                                ? " of " + std::to_string(o.sp_group) + " GPUs for every sample"
                                : "";
  return packing + ", but " + sp + " asks for sequence-parallel groups" + every +
         " (packs on groups are not supported); use " + option_word("sp", "auto") +
         " (groups only for samples that do not fit one GPU) with " + option_word("packing", "on") +
         ", or " + option_word("packing", "off") + " with " + sp;
}
}  // namespace

PlanContext Planner::context(int world_size, bool may_pack) const {
  const int W = world_size > 0 ? world_size : cfg_.world_size;
  PlanContext c;
  c.search = group_search(W);
  c.packing = opt_.packing && may_pack;
  c.groups_needed = max_group() > 1;
  c.per_sample_groups = per_sample_groups(W);
  c.groups_as_given = opt_.sp == SpPolicy::kMin || opt_.sp == SpPolicy::kFixed;
  c.packing_refusal = [this](const StrategyEntry& s) {
    return packing_with_groups(s, opt_, fit_one_gpu());
  };
  c.run = [this](const StrategyEntry& s, const PlanProblem& pr) { return run(s, pr); };
  return c;
}

std::string Planner::cannot_plan(const StrategyEntry& s) const {
  return adaptiveload::cannot_plan(s, context(0, true));
}

Plan Planner::run(const StrategyEntry& s, const PlanProblem& pr, bool may_pack) const {
  if (!s.serves(pr.layout.sync))
    throw ConfigError("strategy '" + std::string(s.name) + "' does not plan for " +
                      sync_name(pr.layout.sync) + " sync mode");
  PlanContext ctx = context(pr.world_size, may_pack);
  // The choices between plans simulate at the speeds this problem plans for: the configured
  // ones, or with speeds learned online (Planner::resume's new_speeds) those.
  ctx.search.env.layout.rank_speed = pr.layout.rank_speed;
  return drive(s, pr, ctx);
}

Plan Planner::plan_fixed_group(const std::string& strategy, int g, int world_size) const {
  const SeqParallel sp = seq_parallel(world_size);
  if (g > 1 && !sp.allows(g))
    throw ConfigError("sequence-parallel group size " + std::to_string(g) +
                      " is not allowed here (sizes must divide the "
                      "world size and the model's heads, and be at most the node size)");
  PlanProblem pr = problem(world_size, cfg_.epoch, 0, {});
  pr.pool_view = &pool_;
  return run_on_groups(find_strategy(strategy), pr, g);
}

Plan Planner::plan(const std::string& strategy, int world_size, int64_t epoch) const {
  if (world_size < 0 || world_size > kMaxWorldSize)
    throw ConfigError("world size is " + std::to_string(world_size) + "; it must be in 1.." +
                      std::to_string(kMaxWorldSize) + " (or 0: the configured one)");
  PlanProblem pr = problem(world_size, epoch < 0 ? cfg_.epoch : epoch, 0, {});
  pr.pool_view = &pool_;  // the whole pool: lent, not copied (4 bytes a sample at 10M)
  return run(find_strategy(strategy), pr);
}

Plan Planner::plan_bucketed(const std::string& strategy) const {
  PlanProblem pr = problem(0, cfg_.epoch, 0, {});
  pr.pool_view = &pool_;
  return run(find_strategy(strategy), pr, false);
}

SimEnv Planner::sim_env(int world_size) const {
  SimEnv env;
  env.buckets = &bucketing_.buckets;
  env.sample_bucket = &bucketing_.sample_bucket;
  env.cost = cost_.get();
  env.memory = memory_;
  env.device_memory_bytes = device_.memory_bytes;
  env.layout = layout(world_size);
  env.allreduce_s = env.layout.step_sync_s;  // step mode only; 0 in micro mode
  if (!cfg_.devices.empty())
    for (size_t r = 0; r < ranks_.device.size(); ++r)
      env.rank_memory_bytes.push_back(ranks_.device[r].memory_bytes),
          env.rank_usable_bytes.push_back(ranks_.usable_bytes(r));
  return env;
}

Metrics Planner::simulate(const Plan& plan) const {
  return adaptiveload::simulate(plan, sim_env(plan.world_size));
}

}  // namespace adaptiveload
