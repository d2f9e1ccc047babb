#include <algorithm>

#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

// A fixed batch size per bucket from a config (Open-Sora bucket_config), capped at memory.
Plan plan_fixed(const PlanProblem& pr) {
  std::vector<int64_t> B(pr.buckets->size());
  for (size_t b = 0; b < B.size(); ++b)
    B[b] = std::min<int64_t>(pr.fixed_batch.at(b), pr.max_batch_memory[b]);
  return plan_lockstep(pr, B, "fixed");
}

}  // namespace adaptiveload
