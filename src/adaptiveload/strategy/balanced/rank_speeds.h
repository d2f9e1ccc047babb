#pragma once
// balanced on ranks that are not alike (ParallelLayout::rank_speed, PlanProblem::
// rank_usable_bytes; docs/planner.md, "Unequal ranks"). balanced plans for alike ranks (its
// step count, global batch and step mix); then each step's samples are dealt again to the ranks
// by speed:
//   step sync   the step's samples, longest first, each to the rank it finishes soonest on
//               (its load plus the sample's cost, over its speed), joining that rank's open
//               micro-batch where it fits the rank's own memory, so a rank's work in the step
//               is about its share of the speeds; or the whole epoch's samples dealt so, over
//               every rank-step levelled (epoch) or against each step's share of the time
//               (fill), the fastest kept;
//   micro sync  slot by slot (every rank keeps one micro-batch a slot): the slot's micro-batches
//               go longest to fastest, and the samples of each bucket (of the whole slot when
//               packed) are shared among the ranks holding them so that the slow rank's
//               micro-batch finishes with the others; unpacked, where the others are at
//               their memory, the slow rank gives up samples into slots of their own (trim);
//               or the whole epoch's slots formed anew (the slower ranks rationed to short
//               work in every slot where only the fast ones take the longest samples).
// Plans with sequence-parallel groups (deal_groups): each step (or slot) dealt again, the wide
// micro-batches on the aligned blocks where they end soonest at their slowest rank's speed
// (Dealer::group_step, group_slot in rank_groups.cpp).
// Every micro-batch stays within its own rank's memory (rank_caps).
#include <vector>

#include "adaptiveload/strategy/balanced/problem.h"

namespace adaptiveload {

// Per rank: the most samples of each bucket one micro-batch takes there (balanced's dual-
// constraint size, grown with the rank's memory beyond the reference device's and, with
// --mem-budget auto, with its device's speed over the slowest device's, never above what fits
// it), and
// the most video tokens of a pack there (grown with the memory only).
struct RankCaps {
  std::vector<std::vector<int64_t>> batch;  // [rank][bucket]
  std::vector<double> pack_tokens, usable;  // [rank]
};
RankCaps rank_caps(const PlanProblem& pr);

Plan deal_to_speeds(const Plan& plan, const BalancedProblem& pr);

}  // namespace adaptiveload
