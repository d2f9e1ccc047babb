#pragma once
// Writing the plan: the one place that lays out a plan's sample ids, micro-batches and
// rank-steps and totals its steps. Strategies that place micro-batches step by step and rank
// by rank append through a PlanWriter (the lockstep slots, balanced on sequence-parallel
// groups); balanced in step sync writes its ids in place while it deals (strategy/rank_steps.h,
// no per-sample list at 10M samples) and totals its steps here.
#include <cstdint>

#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

// A plan with no steps, named `name`, for the problem's world size and sync mode.
Plan empty_plan(const PlanProblem& pr, const char* name);

// Fills plan.steps (one per W rank-steps of rank_begin) with each step's trained samples,
// tokens and padded repeats, and plan.padded_samples, from the micro-batches: one on a group
// of g ranks (Plan::mb_group) is listed on each of them and counted once, at the group's first
// (aligned) rank.
void total_steps(const PlanProblem& pr, Plan& plan);

// Under --end-policy drop, a plan whose only step needed padded repeats to give every rank work
// (fewer samples than ranks) becomes a plan with no steps that lists its trained samples as
// dropped (named `name`, packed as `plan` was); any other plan is returned as it is.
Plan drop_padded_only_step(const PlanProblem& pr, Plan plan, const char* name);

class PlanWriter {
 public:
  // with_groups: record each micro-batch's group size (Plan::mb_group).
  PlanWriter(const PlanProblem& pr, const char* name, bool with_groups);
  // Capacity for the whole plan; throws std::length_error past 2^32 sample slots.
  void reserve(uint64_t samples, uint64_t micro_batches, uint64_t steps);
  // Appends n sample ids and returns where they begin in Plan::sample_ids (a micro-batch's
  // begin); throws std::length_error past 2^32 sample slots.
  uint32_t append_ids(const uint32_t* ids, uint64_t n);
  uint32_t next_id() const { return uint32_t(plan_.sample_ids.size()); }
  // A micro-batch of the current rank-step, its ids already appended, on `group` ranks.
  void add(const MicroBatch& mb, uint8_t group = 1);
  // Closes the current rank-step: step 0's W ranks, then step 1's, and so on.
  void next_rank() { plan_.rank_begin.push_back(plan_.micro_batches.size()); }
  // The plan, its steps totalled (total_steps).
  Plan finish();

 private:
  const PlanProblem& pr_;
  Plan plan_;
  bool groups_;
};

}  // namespace adaptiveload
