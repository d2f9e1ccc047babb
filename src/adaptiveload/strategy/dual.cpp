#include <algorithm>

#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

// The paper's dual constraint: B = floor(min(M_mem / S, M_comp / S^p)).
Plan plan_dual(const PlanProblem& pr) { return plan_lockstep(pr, dual_batch_sizes(pr), "dual"); }

}  // namespace adaptiveload
