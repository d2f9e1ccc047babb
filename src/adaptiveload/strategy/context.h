#pragma once
// What the planner lends every strategy beside its problem (Planner::run calls every strategy
// the same way: drive(entry, problem, context)). A strategy's own driver
// (StrategyEntry::run; null: run_common) reads its options here and calls the planner's
// services through it: what fits memory on a group, the simulator, other strategies' plans.
#include <functional>
#include <string>

#include "adaptiveload/strategy/group_search.h"
#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

struct PlanContext {
  GroupSearch search;  // buckets, allowed group sizes, memory fits, the simulator, fixed's error
  // --packing on, where this call may pack (a strategy that packs when asked; the planner's
  // plan_bucketed asks for the plan without packing).
  bool packing = false;
  // Samples need a sequence-parallel group larger than 1 (on the configured world size).
  bool groups_needed = false;
  // --sp per-sample with a group larger than 1 allowed here: groups tried even where every
  // sample fits one GPU (a strategy that mixes group sizes searches them).
  bool per_sample_groups = false;
  // --sp min or --sp G: every bucket keeps the group it was given (no search of sizes).
  bool groups_as_given = false;
  // Why `s` cannot pack here (sequence-parallel groups in use), in the caller's words.
  std::function<std::string(const StrategyEntry& s)> packing_refusal;
  // Another strategy's plan of a problem, by the planner's path (as Planner::plan runs it).
  std::function<Plan(const StrategyEntry& s, const PlanProblem& pr)> run;
};

// Strategy s on pr: its own driver (StrategyEntry::run), else run_common. The plan is named
// after the entry (a registered copy plans under its own name).
Plan drive(const StrategyEntry& s, const PlanProblem& pr, const PlanContext& ctx);
// The path of a strategy without a driver of its own: a packer packs (refused on groups),
// `fixed`-like strategies need their batch sizes, and samples on sequence-parallel groups run
// on groups of the largest size any needs, as W / g ranks.
Plan run_common(const StrategyEntry& s, const PlanProblem& pr, const PlanContext& ctx);
// Why s cannot plan here ("" when it can): its batch sizes miss a bucket, or it would pack
// where sequence-parallel groups are in use.
std::string cannot_plan(const StrategyEntry& s, const PlanContext& ctx);

}  // namespace adaptiveload
