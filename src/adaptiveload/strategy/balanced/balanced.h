#pragma once
// balanced's paths (strategy/balanced.cpp composes them): plan_balanced runs step sync itself
// and hands micro sync and sequence-parallel groups of different sizes on.
#include <cstdint>
#include <vector>

#include "adaptiveload/strategy/balanced/problem.h"
#include "adaptiveload/strategy/balanced/rank_steps.h"
#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

// balanced in micro sync (FSDP, ZeRO-2/3): micro-batches cut for a target cost, sorted and
// taken W at a time into lockstep slots, the slots grouped into the global batch's steps
// (balanced_micro.cpp).
Plan plan_balanced_micro(const PlanProblem& pr);

// balanced with per-bucket sequence-parallel groups of different sizes (sp_groups.cpp).
Plan plan_balanced_groups(const BalancedProblem& pr);

// Micro sync's cut: bucket b's samples of the bucketed pool from position from[b] on, cut for
// the best of the candidate sizes (a target cost tau per micro-batch, searched over the
// buckets' natural levels and a geometric grid; the dual constraint's and the memory budget's
// sizes; and the caller's `sizes`, per bucket), ranked by slots short of `target` (0: none),
// then padded slots, then the epoch time
// with its exposed collectives. `items` are the micro-batches in cost order, longest first,
// their count made a multiple of W by splits where it can be (`missing`: how many short of
// one); taken W at a time they are slots of nearly equal cost. `least`: per bucket its
// cheapest micro-batch's ticks (kMaxTicks: none).
struct MicroCut {
  std::vector<SlotItem> items;
  uint64_t missing = 0;
  std::vector<Ticks> least;
};
MicroCut cut_for_slots(const PlanProblem& pr, const BucketedPool& pool,
                       const std::vector<uint64_t>& from, uint64_t target,
                       const std::vector<std::vector<int64_t>>& sizes);

// Step sync's dealing inputs for the bucketed pool: every bucket priced on one GPU, micro-batches
// capped by the dual constraint, `order` the buckets with samples (of those with take[b];
// empty: all), longest sample first.
DealInputs deal_inputs(const PlanProblem& pr, const BucketedPool& pool,
                       const std::vector<uint8_t>& take);

// The dealing of step sync chosen for K steps (K * W bins): the counts (logged), the bins laid
// out as steps (perm: position t * W + r to its bin), the inputs that dealt it and its epoch
// ticks. Candidates differ in how large a new micro-batch must be, whole batches, images first
// and contiguous runs; each is laid out and evened as the global batch and the step mix ask
// (BalancedProblem::hold). With start loads (DealInputs::start, balanced on sequence-parallel
// groups: the wide micro-batches placed first), the bins keep their steps (bin r * K + t is
// rank r of step t), the candidates that lay bins out anew are left out, `extra` candidates
// (with the same start loads and offsets, or given pieces) join, only logged deals are kept
// (their callers write them with replay_deal), and the choice among them is plain balanced's
// (the global batch and the step mix held as BalancedProblem::hold asks). Plain balanced (no
// start loads, no extra) is this with its own step count. Throws ConfigError past 2^32 bins.
struct StepDeal {
  BinCounts counts;
  std::vector<uint32_t> perm;
  DealInputs inputs;
  int64_t ticks = INT64_MAX;
};
StepDeal deal_steps(const BalancedProblem& pr, const DealInputs& in, uint64_t K, int64_t allreduce,
                    std::vector<DealInputs> extra);

}  // namespace adaptiveload
