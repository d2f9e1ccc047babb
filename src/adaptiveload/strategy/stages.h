#pragma once
// Small stages the strategies share (balanced in both sync modes, balanced on
// sequence-parallel groups, the bucket loaders), one copy each: the tick type every decision
// is made in, the generator of each purpose, a micro-batch's weight in the global batch, and
// the end-of-epoch padding.
#include <cstdint>
#include <vector>

#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/rng.h"

namespace adaptiveload {

// Time as the strategies decide with it: integer nanoseconds, rounded once from the cost
// model's seconds, so sums and comparisons are exact and the same on every rank.
using Ticks = int64_t;
// 2^60 ns, about 36 years: far above the 1e9 s the planner allows one sample; loads of
// up to 7 of them sum within int64.
constexpr Ticks kMaxTicks = Ticks(1) << 60;

// Nearest tick, at least 1 (any work takes time, so every piece moves a load); kMaxTicks from
// 2^60 ns on and for a time that is not a number.
Ticks to_ticks(double seconds);

// The generator of one purpose for the problem's seed, epoch and segment.
Rng problem_rng(const PlanProblem& pr, uint64_t purpose);  // purpose: an RngPurpose

// A micro-batch's share of the global batch: its tokens (BatchKind::kTokens) or its samples.
uint64_t batch_weight(const PlanProblem& pr, uint16_t bucket, uint64_t count);
// Per slot of W items (slot-major), the sum of its items' batch_weight: the key that
// steps_of_slots deals slots into steps by.
std::vector<uint64_t> slot_keys(const PlanProblem& pr, const std::vector<SlotItem>& items,
                                uint64_t W);

// End of the epoch, padding: one flagged repeat of bucket b's first (shuffled) sample.
SlotItem padded_repeat(const BucketedPool& pool, size_t bucket);
// The bucket that pads: of those with samples in the pool, the one of least cost[b] (ticks),
// ties to the highest index. Throws std::logic_error on an empty pool.
size_t cheapest_bucket(const BucketedPool& pool, const std::vector<Ticks>& cost);

}  // namespace adaptiveload
