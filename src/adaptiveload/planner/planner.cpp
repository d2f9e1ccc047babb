#include "adaptiveload/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/hash.h"

namespace adaptiveload {
namespace {

constexpr int kCompSearchPoints = 32;

std::string gb(double bytes) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

// Largest seconds one sample may cost: beyond it the scheduler's integer ticks saturate.
constexpr double kMaxSampleSeconds = 1e9;

// Range checks of the numeric options, where they enter the core (the CLI and the Python
// sampler both come through here); each message names the option and its range.
void validate_config(PlannerConfig& c) {
  auto bad = [](const std::string& what, const std::string& range, double v) {
    throw ConfigError(what + " is " + fmt("%g", v) + "; it must be " + range);
  };
  if (c.world_size < 1 || c.world_size > kMaxWorldSize)
    bad("world size", "in 1.." + std::to_string(kMaxWorldSize), double(c.world_size));
  if (c.epoch < 0) bad("epoch", ">= 0", double(c.epoch));
  if (c.mem_budget_tokens < 0 || c.mem_budget_tokens > int64_t(1e15))
    bad("mem_budget_tokens (M_mem)", "0 (auto) or a token count up to 1e15",
        double(c.mem_budget_tokens));
  if (!(c.comp_budget >= 0 && c.comp_budget <= 1e300))
    bad("comp_budget (M_comp)", "0 (auto) or a positive finite number", c.comp_budget);
  if (!(c.p == 0 || (c.p > 0 && c.p <= kMaxP)))
    bad("p (exponent of the compute constraint B x S^p)",
        "0 (auto) or in (0, " + fmt("%g", kMaxP) + "]", c.p);
  if (!(c.step_budget_s >= 0 && c.step_budget_s <= kMaxSampleSeconds))
    bad("step_budget_s", "0 (auto) or a number of seconds up to 1e9", c.step_budget_s);
  if (c.grid.empty()) c.grid = load_model(c.model).default_grid;
}

// Advice for a sample too big for memory, following the configuration it was planned under.
std::string oversize_advice(const PlannerConfig& cfg, bool sharded, bool memory_bound) {
  std::string a;
  auto add = [&](const std::string& s) { a += (a.empty() ? "" : ", ") + s; };
  if (memory_bound) {
    if (!cfg.checkpointing) add("enable activation checkpointing (--checkpointing on)");
    if (!sharded && cfg.world_size > 1) add("shard the model state (--sharding fsdp)");
    if (!sharded && cfg.world_size == 1)
      add("shard the model state over more GPUs (--sharding fsdp with -w > 1)");
    add("use a larger device or a smaller bucket grid");
  } else {
    add("raise --mem-budget (or leave it on auto)");
    add("use a smaller bucket grid");
  }
  return "; " + a + ", or pass --on-oversize=skip to leave such samples out";
}

}  // namespace

double Planner::usable_memory_bytes() const { return device_.memory_bytes * (1.0 - device_.memory_reserve_fraction); }

Planner::Planner(const Manifest& manifest, const PlannerConfig& config) : cfg_(config) {
  validate_config(cfg_);
  model_ = load_model(cfg_.model);
  device_ = load_device(cfg_.device);
  grid_ = load_grid(cfg_.grid);
  init(assign_buckets(manifest, grid_, model_), &manifest);
}

Planner::Planner(Bucketing bucketing, const PlannerConfig& config) : cfg_(config) {
  validate_config(cfg_);
  model_ = load_model(cfg_.model);
  device_ = load_device(cfg_.device);
  grid_ = load_grid(cfg_.grid);
  init(std::move(bucketing), nullptr);
}

void Planner::init(Bucketing bucketing, const Manifest* manifest) {
  bucketing_ = std::move(bucketing);
  const auto& buckets = bucketing_.buckets;
  CostContext ctx{model_, device_, cfg_.checkpointing, cfg_.profile};
  cost_ = make_cost_model(cfg_.cost_model, ctx, buckets, bucketing_.bucket_counts);
  if (cfg_.sharding != "auto" && cfg_.sharding != "none" && cfg_.sharding != "fsdp")
    throw ConfigError("sharding must be auto, none or fsdp, not '" + cfg_.sharding + "'");
  const double usable = usable_memory_bytes();
  sharded_ = cfg_.sharding == "fsdp" ||
             (cfg_.sharding == "auto" && cfg_.world_size > 1 &&
              analytic_memory_model(model_, cfg_.checkpointing).static_bytes > 0.5 * usable);
  memory_ = analytic_memory_model(model_, cfg_.checkpointing, sharded_ ? cfg_.world_size : 1);
  if (auto* prof = dynamic_cast<const ProfileCost*>(cost_.get()); prof && prof->has_memory()) memory_ = prof->memory();
  for (const auto& [v, what] :
       {std::pair{memory_.static_bytes, "static bytes"}, {memory_.m0, "m0"}, {memory_.m1, "m1"}})
    check_finite(v, std::string("memory model ") + what);
  if (memory_.static_bytes >= usable) {
    // Advice that applies: sharding over more ranks helps only once there are several.
    std::string advice;
    if (!sharded_ && cfg_.world_size > 1)
      advice = "use --sharding fsdp (shards it over the " + std::to_string(cfg_.world_size) +
               " GPUs) or a larger device";
    else if (!sharded_)
      advice = "use --sharding fsdp with more GPUs (-w), or a larger device";
    else
      advice = "use more GPUs (it is sharded over " + std::to_string(cfg_.world_size) +
               ") or a larger device";
    throw ConfigError("the model state of " + model_.name +
                      " (weights, gradients, optimizer) needs " + gb(memory_.static_bytes) +
                      " per GPU, more than the " + gb(usable) + " usable on " + device_.name +
                      "; " + advice);
  }
  // The cost of every bucket must be a usable number of seconds (a profile or preset at the
  // edge of its range could still overflow it).
  for (const Bucket& b : buckets) {
    const double t = cost_->sample_time(b), mb = cost_->microbatch_time(1, b);
    check_finite(t, "cost model '" + cost_->name() + "': seconds per sample of bucket " + b.name());
    check_finite(
        mb, "cost model '" + cost_->name() + "': seconds of one micro-batch of bucket " + b.name());
    if (!(t > 0) || mb > kMaxSampleSeconds)
      throw ConfigError("cost model '" + cost_->name() + "' gives " + fmt("%g", mb) +
                        " s for one sample of bucket " + b.name() +
                        "; it must be in (0, 1e9] s: check the model, device or profile");
  }

  // Oversize samples: one alone exceeds device memory or the token budget.
  std::vector<int64_t> max_mem(buckets.size());
  std::vector<uint8_t> too_big(buckets.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    max_mem[b] = memory_.max_batch(buckets[b].tokens, usable);
    too_big[b] = max_mem[b] < 1 || (cfg_.mem_budget_tokens > 0 && buckets[b].tokens > cfg_.mem_budget_tokens);
  }
  const int64_t rows = int64_t(bucketing_.sample_bucket.size());
  for (int64_t row = 0; row < rows; ++row) {
    uint16_t b = bucketing_.sample_bucket[size_t(row)];
    if (b == kNoBucket) continue;
    if (!too_big[b]) {
      pool_.push_back(uint32_t(row));
      continue;
    }
    const Bucket& bk = buckets[b];
    std::string msg;
    if (max_mem[b] < 1) {
      double need = memory_.bytes(1, bk.tokens);
      msg = "one sample of bucket " + bk.name() + " (" + std::to_string(bk.tokens) + " tokens) needs " + gb(need) +
            ", " + gb(need - usable) + " more than the " + gb(usable) + " usable on " + device_.name;
    } else {
      msg = "one sample of bucket " + bk.name() + " has " + std::to_string(bk.tokens) + " tokens, " +
            std::to_string(bk.tokens - cfg_.mem_budget_tokens) + " more than the memory budget of " +
            std::to_string(cfg_.mem_budget_tokens) + " tokens";
    }
    if (cfg_.oversize == OversizePolicy::kError) {
      throw ConfigError(
          "manifest row " + std::to_string(row) +
          (manifest ? " (" + manifest->where(row) + ", " + std::string(manifest->path(row)) + ")"
                    : "") +
          ": " + msg + oversize_advice(cfg_, sharded_, max_mem[b] < 1));
    }
    oversize_.push_back({row, msg});
  }
  if (pool_.empty()) {
    // Nothing to plan is an error, not an empty plan: say where every row went.
    const int64_t total = manifest ? manifest->total_rows() : rows;
    throw InputError(
        manifest && !manifest->files().empty() ? manifest->files().front().path : "manifest",
        "nothing to plan: " + std::to_string(total) + " row(s), " + std::to_string(bucketing_.bad) +
            " bad, " + std::to_string(bucketing_.unfit.size()) + " fit no bucket of grid '" +
            grid_.name + "', " + std::to_string(oversize_.size()) + " oversize" +
            (total == 0 ? "; the manifest has a header but no data rows (check its line endings)"
                        : "; fix the rows, or choose a grid (--grid) that fits them"));
  }

  base_.buckets = &bucketing_.buckets;
  base_.sample_bucket = &bucketing_.sample_bucket;
  base_.cost = cost_.get();
  base_.seed = cfg_.seed;
  base_.epoch = cfg_.epoch;
  base_.end_policy = cfg_.end_policy;
  base_.max_batch_memory = max_mem;
  base_.fixed_batch = resolve_fixed(fixed_error_);
  base_.allreduce_s = sim_env(cfg_.world_size).allreduce_s;
  resolve_budgets();

  Hasher h;
  if (manifest) {
    for (int64_t row = 0; row < manifest->total_rows(); ++row) {
      std::string_view p = manifest->path(row);
      h.bytes(p.data(), p.size());
      h.pod(uint8_t(0));
      const ClipInfo& c = manifest->clip(row);
      h.pod(c.num_frames), h.pod(c.height), h.pod(c.width), h.pod(c.fps), h.pod(uint8_t(manifest->usable(row)));
    }
  } else {
    h.bytes(bucketing_.sample_bucket.data(), bucketing_.sample_bucket.size() * sizeof(uint16_t));
    for (const Bucket& b : bucketing_.buckets) h.pod(b.frames), h.pod(b.height), h.pod(b.width), h.pod(b.tokens);
  }
  h.str(model_.name), h.str(device_.name), h.str(grid_.name), h.str(cfg_.cost_model), h.str(cfg_.profile);
  h.pod(uint8_t(sharded_)), h.pod(uint8_t(cfg_.checkpointing)), h.pod(uint8_t(cfg_.end_policy)), h.pod(uint8_t(cfg_.oversize));
  h.pod(cfg_.mem_budget_tokens), h.pod(cfg_.comp_budget), h.pod(cfg_.p), h.pod(cfg_.step_budget_s);
  h.str(cfg_.fixed_config);
  // Resolved budgets too: a state from a planner that resolved them differently (another
  // world size under FSDP, another search result) must not replay silently.
  h.pod(base_.mem_budget_tokens), h.pod(base_.comp_budget), h.pod(base_.p), h.pod(base_.step_budget_s);
  h.pod(memory_.static_bytes);
  fingerprint_ = h.digest();
}

void Planner::resolve_budgets() {
  const auto& buckets = bucketing_.buckets;
  std::vector<int64_t> live(buckets.size(), 0);  // buckets with samples in the pool
  for (uint32_t id : pool_) live[bucketing_.sample_bucket[id]] = 1;

  // M_mem: the largest token budget for which floor(M/S) samples of every bucket fit memory.
  int64_t M = cfg_.mem_budget_tokens;
  if (M <= 0) {
    M = INT64_MAX;
    for (size_t b = 0; b < buckets.size(); ++b)
      if (live[b]) M = std::min<int64_t>(M, (base_.max_batch_memory[b] + 1) * buckets[b].tokens - 1);
    if (M == INT64_MAX) M = 0;
    // Never below the longest sample: each bucket's batch is capped at memory separately.
    for (size_t b = 0; b < buckets.size(); ++b)
      if (live[b]) M = std::max<int64_t>(M, buckets[b].tokens);
  }
  base_.mem_budget_tokens = M;
  base_.p = cfg_.p > 0 ? cfg_.p : fit_power(*cost_, buckets, bucketing_.bucket_counts).p;

  if (cfg_.comp_budget > 0) {
    base_.comp_budget = cfg_.comp_budget;
  } else if (!pool_.empty()) {
    // Search M_comp on a geometric grid from "every bucket alone" to "never binds" for the
    // best simulated throughput of `dual`.
    double lo = 0, hi = 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (!live[b]) continue;
      double sp = std::pow(double(buckets[b].tokens), base_.p);
      int64_t bmax = std::min<int64_t>(base_.max_batch_memory[b], std::max<int64_t>(1, M / buckets[b].tokens));
      lo = std::max(lo, sp);
      hi = std::max(hi, double(bmax) * sp);
    }
    hi = std::max(hi, lo);
    check_finite(lo, "the compute budget search's lower end (B x S^p of the longest sample)");
    check_finite(hi, "the compute budget search's upper end");
    double best = lo, best_tp = -1;
    for (int i = 0; i < kCompSearchPoints; ++i) {
      double c = lo * std::pow(hi / lo, double(i) / (kCompSearchPoints - 1));
      PlanProblem pr = problem(cfg_.world_size, 0, 0, pool_);
      pr.comp_budget = c;
      Metrics m = simulate(plan_dual(pr));
      comp_search_.emplace_back(c, m.throughput_samples_per_s);
      if (m.throughput_samples_per_s > best_tp) best_tp = m.throughput_samples_per_s, best = c;
    }
    base_.comp_budget = best;
  }

  base_.step_budget_s = cfg_.step_budget_s > 0 ? cfg_.step_budget_s : auto_step_budget(*cost_);
  // Output check: resolved budgets are finite (inputs were range-checked on the way in).
  check_finite(base_.p, "the exponent p");
  check_finite(base_.comp_budget, "the compute budget M_comp");
  check_finite(base_.step_budget_s, "the step budget");
  check_finite(base_.allreduce_s, "the all-reduce time per step");
  if (!(base_.p > 0))
    throw ConfigError("the exponent p fitted to the cost model is " + fmt("%g", base_.p) +
                      "; pass --p");
}

double Planner::auto_step_budget(const CostModel& cost) const {
  // The slowest micro-batch the memory budget admits, i.e. the longest step equal_tokens
  // already runs: balanced keeps every rank busy for up to that long.
  const auto& buckets = bucketing_.buckets;
  std::vector<uint8_t> live(buckets.size(), 0);
  for (uint32_t id : pool_) live[bucketing_.sample_bucket[id]] = 1;
  double s = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (!live[b]) continue;
    const int64_t B = std::max<int64_t>(
        1, std::min<int64_t>(base_.max_batch_memory[b], base_.mem_budget_tokens / buckets[b].tokens));
    s = std::max(s, cost.microbatch_time(B, buckets[b]));
  }
  return s;
}

PlanProblem Planner::problem(int world_size, int64_t epoch, uint64_t segment, std::vector<uint32_t> pool) const {
  PlanProblem pr = base_;
  pr.epoch = epoch;
  pr.world_size = world_size > 0 ? world_size : cfg_.world_size;
  pr.allreduce_s = sim_env(pr.world_size).allreduce_s;
  pr.segment = segment;
  pr.pool = std::move(pool);
  return pr;
}

std::vector<int64_t> Planner::resolve_fixed(std::string& error) const {
  auto table = cfg_.fixed_config.empty() ? grid_.fixed_batch_sizes : load_fixed_batch_sizes(cfg_.fixed_config);
  const std::string src = cfg_.fixed_config.empty() ? "grid '" + grid_.name + "'" : cfg_.fixed_config;
  std::vector<int64_t> out(bucketing_.buckets.size(), 1);
  for (size_t b = 0; b < bucketing_.buckets.size(); ++b) {
    const Bucket& bk = bucketing_.buckets[b];
    auto tier = table.find(bk.tier);
    if (tier == table.end() || tier->second.upper_bound(bk.frames) == tier->second.begin()) {
      error = "fixed batch sizes of " + src + " have no entry for bucket " + bk.name() + " (tier " + bk.tier + ", " +
              std::to_string(bk.frames) + " frames); add one, or pass --fixed-config FILE";
      return {};
    }
    out[b] = std::prev(tier->second.upper_bound(bk.frames))->second;
  }
  return out;
}

Plan Planner::run(const StrategyEntry& s, const PlanProblem& pr) const {
  if (std::string(s.name) == "fixed" && pr.fixed_batch.size() != bucketing_.buckets.size())
    throw ConfigError(fixed_error_);
  return s.fn(pr);
}

Plan Planner::plan(const std::string& strategy, int world_size, int64_t epoch) const {
  if (world_size < 0 || world_size > kMaxWorldSize)
    throw ConfigError("world size is " + std::to_string(world_size) + "; it must be in 1.." +
                      std::to_string(kMaxWorldSize) + " (or 0: the configured one)");
  return run(find_strategy(strategy), problem(world_size, epoch < 0 ? cfg_.epoch : epoch, 0, pool_));
}

SimEnv Planner::sim_env(int world_size) const {
  SimEnv env;
  env.buckets = &bucketing_.buckets;
  env.cost = cost_.get();
  env.memory = memory_;
  env.device_memory_bytes = device_.memory_bytes;
  // fp32 gradients, one ring all-reduce per global step.
  env.allreduce_s = ring_allreduce_seconds(model_.params * 4.0, world_size, device_.allreduce_bus_bytes_per_s,
                                           device_.allreduce_latency_s);
  return env;
}

Metrics Planner::simulate(const Plan& plan) const { return adaptiveload::simulate(plan, sim_env(plan.world_size)); }

PlanState Planner::initial_state(const std::string& strategy, int world_size, int64_t epoch) const {
  find_strategy(strategy);
  PlanState s;
  s.strategy = strategy;
  s.fingerprint = fingerprint_;
  s.seed = cfg_.seed;
  s.epoch = epoch < 0 ? cfg_.epoch : epoch;
  s.segments = {{world_size > 0 ? world_size : cfg_.world_size, 0}};
  return s;
}

Planner::Resumed Planner::resume(const PlanState& state, int world_size, const std::string& new_cost) const {
  if (state.fingerprint != fingerprint_)
    throw InputError("sampler state", "was saved for another manifest or planner configuration (fingerprint mismatch); "
                                      "resume with the same manifest and options, or start a new epoch");
  if (state.seed != cfg_.seed)
    throw InputError("sampler state", "was saved for seed " + std::to_string(state.seed) + ", not seed " +
                                          std::to_string(cfg_.seed) + "; resume with the same seed");
  if (!state.segment_costs.empty() && state.segment_costs.size() != state.segments.size())
    throw InputError("sampler state", "segment costs do not match its segments");
  const StrategyEntry& strat = find_strategy(state.strategy);
  if (world_size < 1 || world_size > kMaxWorldSize)
    throw ConfigError("world size is " + std::to_string(world_size) + "; it must be in 1.." +
                      std::to_string(kMaxWorldSize));
  std::vector<uint8_t> done(bucketing_.sample_bucket.size(), 0);
  auto remaining_pool = [&] {
    std::vector<uint32_t> pool;
    for (uint32_t id : pool_)
      if (!done[id]) pool.push_back(id);
    return pool;
  };
  // A segment planned with an adapted cost model deals by that model; budgets stay the
  // configured ones (they are part of the fingerprint).
  auto plan_segment = [&](int w, uint64_t seg, const std::string& cost) {
    PlanProblem pr = problem(w, state.epoch, seg, remaining_pool());
    std::unique_ptr<CostModel> adapted;
    if (!cost.empty()) {
      adapted = ProfileCost::from_cost_json(cost);
      pr.cost = adapted.get();
      // The step budget is seconds: an automatic one is re-derived under the adapted model;
      // a given one is raised, if needed, to the adapted model's longest single sample.
      if (cfg_.step_budget_s > 0) {
        for (uint32_t id : pr.pool) {
          const Bucket& b = bucketing_.buckets[bucketing_.sample_bucket[id]];
          pr.step_budget_s = std::max(pr.step_budget_s, adapted->microbatch_time(1, b) * (1 + 1e-9));
        }
      } else {
        pr.step_budget_s = auto_step_budget(*adapted);
      }
    }
    return run(strat, pr);
  };
  Resumed out;
  out.state = state;
  for (size_t seg = 0; seg < state.segments.size(); ++seg) {
    auto [w, steps_done] = state.segments[seg];
    Plan p = plan_segment(w, seg, state.cost_of(seg));
    if (size_t(steps_done) > p.num_steps())
      throw InputError("sampler state", "records " + std::to_string(steps_done) + " steps done but the plan has " +
                                            std::to_string(p.num_steps()));
    const bool last = seg + 1 == state.segments.size();
    if (last && w == world_size && new_cost.empty()) {
      out.plan = std::move(p);
      out.first_step = size_t(steps_done);
      return out;
    }
    for (uint64_t m = 0; m < p.rank_begin[size_t(steps_done) * size_t(w)]; ++m) {
      const MicroBatch& mb = p.micro_batches[m];
      if (!mb.padded)
        for (uint32_t k = 0; k < mb.count; ++k) done[p.sample_ids[mb.begin + k]] = 1;
    }
  }
  // World size or cost model changed: plan what is left as a new segment.
  const uint64_t seg = state.segments.size();
  // The new segment keeps the latest adapted model unless a newer one is given.
  std::string cost = new_cost.empty() ? state.cost_of(seg - 1) : canonical_cost_json(new_cost);
  out.plan = plan_segment(world_size, seg, cost);
  out.first_step = 0;
  out.state.segments.emplace_back(world_size, 0);
  if (!cost.empty() || !out.state.segment_costs.empty()) {
    out.state.segment_costs.resize(out.state.segments.size() - 1);
    out.state.segment_costs.push_back(cost);
  }
  return out;
}

}  // namespace adaptiveload
