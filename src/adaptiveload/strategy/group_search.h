#pragma once
// Every strategy beside sequence parallelism: one group size g for all samples (the problem as
// W / g ranks that each are one group). The planner supplies what fits memory and the
// simulator (GroupSearch, in the PlanContext every strategy gets); the plans are the
// strategies' own. balanced's search of each bucket's g is balanced/group_choice.h.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "adaptiveload/sim/metrics.h"
#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

// What the searches read of the planner, for the problem's world size.
struct GroupSearch {
  const std::vector<Bucket>* buckets = nullptr;
  SeqParallel sp;  // allowed group sizes and all-to-all costs
  // Largest batch of bucket b that fits memory on a group of g ranks (0: none does).
  std::function<int64_t(size_t b, int g)> max_batch_on;
  SimEnv env;               // the simulator (cost: the planner's model)
  std::string fixed_error;  // why `fixed` cannot run, "" when it can
};

// The problem with every sample on g ranks, as W / g ranks that each are one group.
// `group_cost`: the cost model on g ranks (GroupCost of pr.cost), or null where no strategy
// runs on the result (budgets only).
PlanProblem as_groups(const GroupSearch& gs, const PlanProblem& pr, int g,
                      const CostModel* group_cost);
// Strategy s with every sample on g ranks; each of the W / g plan ranks is listed as its g ranks.
Plan run_on_groups(const GroupSearch& gs, const StrategyEntry& s, const PlanProblem& pr, int g);
// Whether a plan's simulated steps keep the global batch: each step's tokens (samples for
// samples:N) within kMaxBatchDev of their mean; a free batch always.
inline bool keeps_global_batch(const Metrics& m, BatchKind kind) {
  if (kind == BatchKind::kFree) return true;
  return (kind == BatchKind::kSamples ? m.global_batch_samples_max_dev
                                      : m.global_batch_tokens_max_dev) <= kMaxBatchDev;
}
}  // namespace adaptiveload
