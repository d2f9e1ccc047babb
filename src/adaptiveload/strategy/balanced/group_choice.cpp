#include "adaptiveload/strategy/balanced/group_choice.h"

#include <algorithm>

#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {

Plan run_balanced_held(const GroupSearch& gs, const BalancedPlanner& plan,
                       const BalancedProblem& pr,
                       const std::function<double()>& best_other_throughput) {
  Plan held = plan(pr);
  // Up to kHeldCheckSamples samples, the per-step batch and then the mix are let go where
  // keeping them would leave balanced slower than a bucket loader at the same global batch
  // (small pools with long clips at few steps); beyond, both are kept.
  constexpr size_t kHeldCheckSamples = 2'000'000;
  if (pr.layout.lockstep_slots() || pr.target_steps() == 0 ||
      pr.pool_ids().size() > kHeldCheckSamples)
    return held;
  BalancedProblem q = pr;
  q.hold = 0;
  Plan quick = plan(q);
  double t = simulate(held, gs.env).throughput_samples_per_s;
  if (t >= simulate(quick, gs.env).throughput_samples_per_s) return held;
  const double best_other = best_other_throughput();
  if (t >= best_other) return held;
  for (const uint8_t hold : {kHoldBatch, kHoldMix}) {
    q.hold = hold;
    Plan p = plan(q);
    if (simulate(p, gs.env).throughput_samples_per_s >= best_other) return p;
  }
  return quick;
}

Plan run_balanced_groups(const GroupSearch& gs, const StrategyEntry& s, const BalancedProblem& pr) {
  const auto& buckets = *gs.buckets;
  const size_t nb = buckets.size();
  const SeqParallel& sp = gs.sp;
  const std::vector<uint8_t> live = live_buckets(pr);
  std::vector<int> sizes;
  for (int g = 1; g <= kMaxGroup; g *= 2)
    if (sp.allows(g)) sizes.push_back(g);
  double c_max = 0, work = 0;
  std::vector<int64_t> count(nb, 0);
  for (uint32_t id : pr.pool_ids()) ++count[(*pr.sample_bucket)[id]];
  for (size_t b = 0; b < nb; ++b)
    if (live[b]) {
      const int g = pr.group(uint16_t(b));
      c_max = std::max(c_max, group_cost(*pr.cost, MicroShape::uniform(1, buckets[b]), g, sp));
      work +=
          double(count[b]) * g * group_work(*pr.cost, MicroShape::uniform(1, buckets[b]), g, sp);
    }
  // A rank-step's share of the work at the global batch's step count (0: free).
  const uint64_t K = pr.target_steps();
  const double share = K > 0 ? work / (double(K) * pr.world_size) : 0;
  // Candidates: a floor f for every bucket, and then long samples raised until one takes at
  // most theta (inf; a quarter of the longest sample at its smallest group; a rank-step's
  // share of the work, or half of it); each is planned and simulated, and the fastest kept.
  std::vector<std::vector<uint8_t>> cands;
  for (int f : sizes)
    for (double theta :
         {1e300, c_max / 4, share > 0 ? share : 1e300, share > 0 ? share / 2 : 1e300}) {
      std::vector<uint8_t> g(nb, 1);
      bool ok = true;
      for (size_t b = 0; b < nb && ok; ++b) {
        if (!live[b]) continue;
        size_t k = 0;
        while (k < sizes.size() &&
               (sizes[k] < std::max(f, pr.group(uint16_t(b))) || gs.max_batch_on(b, sizes[k]) < 1))
          ++k;
        while (k + 1 < sizes.size() &&
               group_cost(*pr.cost, MicroShape::uniform(1, buckets[b]), sizes[k], sp) > theta)
          ++k;
        ok = k < sizes.size();
        if (ok) g[b] = uint8_t(sizes[k]);
      }
      if (ok && std::find(cands.begin(), cands.end(), g) == cands.end()) cands.push_back(g);
    }
  if (cands.empty())
    throw ConfigError("no allowed sequence-parallel group size fits every sample on " +
                      std::to_string(pr.world_size) + " ranks (memory or " +
                      option_word("mem_budget_tokens") + "); allow larger groups (" +
                      option_word("sp_sizes") + ") or raise the budget");
  SimEnv env = gs.env;
  env.cost = pr.cost;
  auto plan_with = [&](const std::vector<uint8_t>& g, const std::vector<uint32_t>* sub) {
    BalancedProblem q = pr;
    if (sub) q.pool_view = sub;
    for (size_t b = 0; b < nb; ++b) q.max_batch_memory[b] = gs.max_batch_on(b, g[b]);
    q.bucket_group = g;
    const GroupSpan span = group_span(g, live);
    return span.min == span.max ? run_on_groups(gs, s, q, span.max) : plan_balanced_with(q);
  };
  // A large pool is compared on every k-th of its samples (the global batch is a rate per
  // step, so the sample keeps its shape) and only the chosen candidate is planned in full.
  constexpr size_t kSearchSamples = size_t(1) << 17;
  const std::vector<uint32_t>& ids = pr.pool_ids();
  std::vector<uint32_t> sub;
  if (ids.size() > kSearchSamples && cands.size() > 1) {
    const size_t stride = (ids.size() + kSearchSamples - 1) / kSearchSamples;
    for (size_t i = 0; i < ids.size(); i += stride) sub.push_back(ids[i]);
  }
  // The fastest among the candidates that keep the global batch's step count (as near as
  // any does): a plan of fewer, larger steps would win by running fewer collectives. In step
  // sync, where the global batch is held (BalancedProblem::hold, as balanced holds it without
  // groups), one that keeps each step's tokens (or samples) within kMaxBatchDev of their mean
  // is kept unless another is over kHoldCost faster.
  const uint64_t target = sub.empty() ? K : [&] {
    PlanProblem q = pr;
    q.pool_view = &sub;
    return q.target_steps();
  }();
  const bool hold_batch = (pr.hold & kHoldBatch) && target > 0 && !pr.layout.lockstep_slots();
  Plan best;
  size_t best_i = 0;
  double best_tp = -1;
  uint64_t best_steps = 0;
  bool best_holds = false;
  for (size_t i = 0; i < cands.size(); ++i) {
    Plan p = plan_with(cands[i], sub.empty() ? nullptr : &sub);
    const Metrics m = adaptiveload::simulate(p, env);
    const double tp = m.throughput_samples_per_s;
    const uint64_t steps = target > 0 ? std::min<uint64_t>(p.num_steps(), target) : 0;
    const bool holds = !hold_batch || keeps_global_batch(m, pr.batch_kind);
    const bool better = steps != best_steps   ? steps > best_steps
                        : holds == best_holds ? tp > best_tp
                        : holds               ? tp * (1 + kHoldCost) >= best_tp
                                              : tp > best_tp * (1 + kHoldCost);
    if (better)
      best_tp = tp, best_i = i, best_steps = steps, best_holds = holds, best = std::move(p);
  }
  return sub.empty() ? best : plan_with(cands[best_i], nullptr);
}

}  // namespace adaptiveload
