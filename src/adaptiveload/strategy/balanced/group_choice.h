#pragma once
// balanced's choices that plan and simulate candidates (its driver, drive.h, composes them):
// the group size of each bucket where samples run on sequence-parallel groups, and its
// step-sync invariants (BalancedProblem::hold) let go where a bucket loader would be faster.
#include <functional>

#include "adaptiveload/strategy/balanced/problem.h"
#include "adaptiveload/strategy/group_search.h"

namespace adaptiveload {

// balanced with per-sample groups: from each bucket's smallest fitting g, candidates that
// raise groups (a floor for all, and long samples further), the one whose plan simulates
// fastest among those that keep the global batch's step count; in step sync, where the batch
// is held (BalancedProblem::hold), one that keeps it is kept unless another is over kHoldCost
// faster.
Plan run_balanced_groups(const GroupSearch& gs, const StrategyEntry& s, const BalancedProblem& pr);
// balanced without groups: its plan (`plan`: plan_balanced_with) keeping the step-sync
// invariants (BalancedProblem::hold), or with fewer of them where a bucket loader would beat
// it. `best_other`: the best simulated throughput (samples/s) of the other strategies on pr,
// asked for only when needed.
using BalancedPlanner = std::function<Plan(const BalancedProblem&)>;
Plan run_balanced_held(const GroupSearch& gs, const BalancedPlanner& plan,
                       const BalancedProblem& pr, const std::function<double()>& best_other);

}  // namespace adaptiveload
