#include <algorithm>

#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

// The baseline the paper criticises: every batch holds about M_mem tokens, B = floor(M_mem / S),
// whatever its attention cost; capped at what fits device memory.
std::vector<int64_t> equal_tokens_batch_sizes(const PlanProblem& pr) {
  std::vector<int64_t> B(pr.buckets->size());
  for (size_t b = 0; b < B.size(); ++b) {
    int64_t S = (*pr.buckets)[b].tokens;
    B[b] =
        std::max<int64_t>(1, std::min<int64_t>(pr.max_batch_memory[b], pr.mem_budget_tokens / S));
  }
  return B;
}

Plan plan_equal_tokens(const PlanProblem& pr) {
  return plan_lockstep(pr, equal_tokens_batch_sizes(pr), "equal_tokens");
}

}  // namespace adaptiveload
