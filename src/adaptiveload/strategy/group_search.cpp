#include "adaptiveload/strategy/group_search.h"

#include <algorithm>

#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {

PlanProblem as_groups(const GroupSearch& gs, const PlanProblem& pr, int g,
                      const CostModel* group_cost) {
  PlanProblem q = pr;
  if (g <= 1) {
    q.bucket_group.clear();
    return q;
  }
  q.world_size = pr.world_size / g;
  q.cost = group_cost;
  // Every bucket on g ranks: what fits there (0 where g is not allowed).
  q.max_batch_memory.assign(gs.buckets->size(), 0);
  if (gs.sp.allows(g))
    for (size_t b = 0; b < gs.buckets->size(); ++b) q.max_batch_memory[b] = gs.max_batch_on(b, g);
  q.bucket_group.clear();
  // A group holds g times a GPU's tokens and does 1 / g of the compute per GPU.
  q.mem_budget_tokens = pr.mem_budget_tokens * g;
  q.comp_budget = pr.comp_budget * g;
  return q;
}

Plan run_on_groups(const GroupSearch& gs, const StrategyEntry& s, const PlanProblem& pr, int g) {
  const std::vector<Bucket>& buckets = *gs.buckets;
  // The problem's own cost model (an adapted one after online adaptation) on g ranks.
  const GroupCost cost(*pr.cost, g, gs.sp);
  const PlanProblem q = as_groups(gs, pr, g, &cost);
  const std::vector<uint8_t> live = live_buckets(pr);
  for (size_t b = 0; b < q.max_batch_memory.size(); ++b)
    if (q.max_batch_memory[b] < 1 && live[b])
      throw ConfigError("a sample of bucket " + buckets[b].name() +
                        " does not fit a sequence-parallel group of " + std::to_string(g) +
                        "; use a larger group size");
  if (s.needs_fixed_batch() && q.fixed_batch.size() != buckets.size())
    throw ConfigError(gs.fixed_error);
  Plan p = s.fn(q);
  // Each of the W / g plan ranks is a group: its g ranks list the same micro-batches.
  Plan out;
  out.strategy = p.strategy;
  out.world_size = pr.world_size;
  out.sync = p.sync;
  out.sample_ids = std::move(p.sample_ids);
  out.steps = std::move(p.steps);
  out.padded_samples = p.padded_samples;
  out.dropped = std::move(p.dropped);
  out.micro_batches.reserve(p.micro_batches.size() * size_t(g));
  out.rank_begin.reserve(out.steps.size() * size_t(pr.world_size) + 1);
  for (size_t t = 0; t < out.steps.size(); ++t)
    for (int v = 0; v < q.world_size; ++v) {
      const auto [b, e] = p.rank_range(t, v);
      for (int k = 0; k < g; ++k) {
        out.micro_batches.insert(out.micro_batches.end(), p.micro_batches.begin() + long(b),
                                 p.micro_batches.begin() + long(e));
        out.rank_begin.push_back(out.micro_batches.size());
      }
    }
  out.mb_group.assign(out.micro_batches.size(), uint8_t(g));
  return out;
}

}  // namespace adaptiveload
