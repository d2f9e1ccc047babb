#pragma once
// balanced's paths (strategy/balanced.cpp composes them): plan_balanced runs step sync itself
// and hands micro sync and sequence-parallel groups of different sizes on.
#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

// balanced in micro sync (FSDP, ZeRO-2/3): micro-batches cut for a target cost, sorted and
// taken W at a time into lockstep slots, the slots grouped into the global batch's steps
// (balanced_micro.cpp).
Plan plan_balanced_micro(const PlanProblem& pr);

}  // namespace adaptiveload
