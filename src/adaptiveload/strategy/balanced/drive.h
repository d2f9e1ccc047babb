#pragma once
// balanced's one entry (its registry line's StrategyEntry::run): what the planner calls for
// it, as for every strategy (strategy/context.h). It composes balanced's paths: packed or
// bucketed (the faster, the global batch weighed), sequence-parallel group sizes per sample
// (group_choice.h), the step-sync invariants held where no bucket loader would beat it, and
// on ranks that are not alike, the plan dealt again by speed (rank_speeds.h). The plans
// themselves are StrategyEntry::fn's (plan_balanced, balanced.h).
#include "adaptiveload/strategy/context.h"

namespace adaptiveload {

Plan run_balanced(const StrategyEntry& s, const PlanProblem& pr, const PlanContext& ctx);

}  // namespace adaptiveload
