#pragma once
// Batching strategies. Each is a pure function of a PlanProblem (one file per strategy, one
// line in strategy_registry.cpp): same problem, same plan, byte for byte.
#include <cstdint>
#include <string>
#include <vector>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/geometry/geometry.h"
#include "adaptiveload/plan/plan.h"

namespace adaptiveload {

struct PlanProblem {
  const std::vector<Bucket>* buckets = nullptr;
  const std::vector<uint16_t>* sample_bucket = nullptr;  // per sample id (kNoBucket: skip)
  std::vector<uint32_t> pool;  // sample ids to plan this epoch, ascending
  const CostModel* cost = nullptr;  // what the planner believes a micro-batch costs
  int world_size = 1;
  uint64_t seed = 0;
  int64_t epoch = 0;
  uint64_t segment = 0;  // elastic-resume segment: 0 for an uninterrupted epoch
  EndPolicy end_policy = EndPolicy::kPad;

  // Budgets, resolved by the planner (see planner.h) before any strategy runs.
  std::vector<int64_t> max_batch_memory;  // per bucket: largest B that fits device memory
  int64_t mem_budget_tokens = 0;          // M_mem: B * S <= M_mem
  double comp_budget = 0;                 // M_comp: B * S^p <= M_comp (0: none)
  double p = 2;                           // the paper's exponent
  double step_budget_s = 0;               // balanced: most seconds of work per rank per step
  double allreduce_s = 0;                 // balanced: gradient all-reduce per step, seconds
  std::vector<int64_t> fixed_batch;       // per bucket, for `fixed`

  int64_t tokens(uint16_t bucket) const { return (*buckets)[bucket].tokens; }
};

struct StrategyEntry {
  const char* name;
  const char* summary;
  Plan (*fn)(const PlanProblem&);
};

const std::vector<StrategyEntry>& strategies();
const StrategyEntry& find_strategy(const std::string& name);  // throws ConfigError

Plan plan_equal_tokens(const PlanProblem& pr);
Plan plan_fixed(const PlanProblem& pr);
Plan plan_dual(const PlanProblem& pr);
Plan plan_balanced(const PlanProblem& pr);

// Shared by the one-micro-batch-per-rank strategies: groups the pool by bucket, shuffles
// each bucket, cuts it into batches of batch_of_bucket[b] samples (the last one partial),
// shuffles the batch order, and deals W batches to each global step. The end-of-epoch
// policy completes or drops a final step with fewer than W batches.
Plan plan_lockstep(const PlanProblem& pr, const std::vector<int64_t>& batch_of_bucket, const char* name);

// Dual-constraint batch size of every bucket: floor(min(M_mem / S, M_comp / S^p)), at least 1,
// never more than fits in memory.
std::vector<int64_t> dual_batch_sizes(const PlanProblem& pr);

// Pool sample ids grouped by bucket (bucket-major, each bucket shuffled with the problem's
// seed, epoch and segment); begin[b]..begin[b+1] is bucket b.
struct BucketedPool {
  std::vector<uint32_t> ids;
  std::vector<uint64_t> begin;
};
BucketedPool shuffled_by_bucket(const PlanProblem& pr);

// RNG purposes: one independent stream per use.
enum RngPurpose : uint64_t { kPurposeBucketShuffle = 1, kPurposeBatchOrder = 2, kPurposeBalancedDraw = 3 };

}  // namespace adaptiveload
