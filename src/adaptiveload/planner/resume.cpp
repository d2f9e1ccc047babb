// Resume: the state at the start of an epoch, and the plan to continue a saved state on
// (possibly) another world size or an adapted cost model, as a new segment of the epoch.
#include <algorithm>
#include <memory>

#include "adaptiveload/planner/planner.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {

PlanState Planner::initial_state(const std::string& strategy, int world_size, int64_t epoch) const {
  find_strategy(strategy);
  PlanState s;
  s.strategy = strategy;
  s.fingerprint = fingerprint_;
  s.seed = cfg_.seed;
  s.epoch = epoch < 0 ? cfg_.epoch : epoch;
  s.segments = {{world_size > 0 ? world_size : cfg_.world_size, 0}};
  s.sync = sync_;
  return s;
}

Planner::Resumed Planner::resume(const PlanState& state, int world_size,
                                 const std::string& new_cost,
                                 const std::vector<double>& new_speeds) const {
  if (state.sync != sync_)
    throw InputError("sampler state",
                     "was saved for a " + std::string(sync_name(state.sync)) + "-sync plan (" +
                         sync_mode_name(state.sync).engines + "), but this planner plans for " +
                         sync_name(sync_) +
                         " sync; resume with the same sync mode (and sharding) it was saved with");
  if (state.fingerprint != fingerprint_)
    throw InputError(
        "sampler state",
        "was saved for another manifest or planner configuration (fingerprint mismatch); "
        "resume with the same manifest and options, or start a new epoch");
  if (state.seed != cfg_.seed)
    throw InputError("sampler state", "was saved for seed " + std::to_string(state.seed) +
                                          ", not seed " + std::to_string(cfg_.seed) +
                                          "; resume with the same seed");
  if (!state.segment_costs.empty() && state.segment_costs.size() != state.segments.size())
    throw InputError("sampler state", "segment costs do not match its segments");
  if (!state.segment_speeds.empty() && state.segment_speeds.size() != state.segments.size())
    throw InputError("sampler state", "segment speeds do not match its segments");
  if (!new_speeds.empty() && new_speeds.size() != size_t(world_size))
    throw InputError("learned rank speeds", "hold " + std::to_string(new_speeds.size()) +
                                                " factors, not one per rank (" +
                                                std::to_string(world_size) + ")");
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
  // Learned speed factors (online adaptation) multiply each rank's configured speed.
  auto plan_segment = [&](int w, uint64_t seg, const std::string& cost,
                          const std::vector<double>& speeds) {
    PlanProblem pr = problem(w, state.epoch, seg, remaining_pool());
    pr.layout_release = state.layout;  // a state of an earlier release resumes as it was planned
    if (!speeds.empty()) {
      if (speeds.size() != size_t(w))
        throw InputError("sampler state", "segment " + std::to_string(seg) +
                                              " has learned speeds for " +
                                              std::to_string(speeds.size()) + " ranks, not its " +
                                              std::to_string(w));
      pr.layout.rank_speed.resize(size_t(w), 1.0);
      for (size_t r = 0; r < size_t(w); ++r) pr.layout.rank_speed[r] *= speeds[r];
    }
    std::unique_ptr<CostModel> adapted;
    if (!cost.empty()) {
      adapted = adapted_cost(cost);
      pr.cost = adapted.get();
      // The step budget is seconds: an automatic one is re-derived under the adapted model;
      // a given one is raised, if needed, to the adapted model's longest single sample.
      if (cfg_.step_budget_s > 0) {
        for (uint32_t id : pr.pool_ids()) {
          const Bucket& b = bucketing_.buckets[bucketing_.sample_bucket[id]];
          pr.step_budget_s =
              std::max(pr.step_budget_s, adapted->cost(MicroShape::uniform(1, b)) * (1 + 1e-9));
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
    Plan p = plan_segment(w, seg, state.cost_of(seg), state.speeds_of(seg));
    if (size_t(steps_done) > p.num_steps())
      throw InputError("sampler state", "records " + std::to_string(steps_done) +
                                            " steps done but the plan has " +
                                            std::to_string(p.num_steps()));
    const bool last = seg + 1 == state.segments.size();
    if (last && w == world_size && new_cost.empty() && new_speeds.empty()) {
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
  // Learned speeds likewise, for the same ranks: on another world size they are learned anew.
  std::vector<double> speeds = canonical_speeds(new_speeds);
  if (new_speeds.empty() && world_size == state.segments.back().first)
    speeds = state.speeds_of(seg - 1);
  out.plan = plan_segment(world_size, seg, cost, speeds);
  out.first_step = 0;
  out.state.segments.emplace_back(world_size, 0);
  if (!cost.empty() || !out.state.segment_costs.empty()) {
    out.state.segment_costs.resize(out.state.segments.size() - 1);
    out.state.segment_costs.push_back(cost);
  }
  if (!speeds.empty() || !out.state.segment_speeds.empty()) {
    out.state.segment_speeds.resize(out.state.segments.size() - 1);
    out.state.segment_speeds.push_back(speeds);
  }
  return out;
}

std::vector<double> Planner::configured_speeds(int world_size) const {
  const int W = world_size > 0 ? world_size : cfg_.world_size;
  return ranks_.empty() ? std::vector<double>(size_t(W), 1.0) : layout(W).rank_speed;
}

}  // namespace adaptiveload
