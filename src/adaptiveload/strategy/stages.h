#pragma once
// Small stages the strategies share (balanced in both sync modes, balanced on
// sequence-parallel groups, the bucket loaders), one copy each: the tick type every decision
// is made in, the generator of each purpose, a micro-batch's weight in the global batch, the
// end-of-epoch padding, the split to a multiple of W and the shrink to the step count.
#include <cstdint>
#include <functional>
#include <optional>
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
// A micro-batch's ticks on a group of g ranks (group_cost, rounded once; g = 1: the cost
// model's own cost).
Ticks group_ticks(const PlanProblem& pr, const MicroShape& s, int g);

// One sample of a bucket on a group of g ranks (g = 1: one GPU), in ticks: `per`, its work at
// full efficiency (a large micro-batch's marginal cost, group_work), and `fixed`, what a
// micro-batch of it costs beyond that (overhead and the small-batch ramp: group_cost of one
// sample less `per`, at least 0). Every bucket-cutting stage prices a bucket from these.
struct SampleTicks {
  Ticks per, fixed;
};
SampleTicks sample_ticks(const PlanProblem& pr, const Bucket& bk, int g = 1);

// Bucket b's samples on sequence-parallel groups of group[b] ranks, or no groups at all when
// every group is of 1: a group of 1 is a rank, and the problem then takes balanced's plain
// path (PlanProblem::group reads an empty list as 1 for every bucket).
void set_bucket_groups(PlanProblem& pr, const std::vector<uint8_t>& group);

// Per bucket (of `buckets`), 1 when `ids` hold a sample of it (sample_bucket: per sample id).
std::vector<uint8_t> live_buckets(const std::vector<uint32_t>& ids,
                                  const std::vector<uint16_t>& sample_bucket, size_t buckets);
// live_buckets of the problem's pool.
std::vector<uint8_t> live_buckets(const PlanProblem& pr);
// The smallest and largest group[b] over the live buckets. With none live, min > max (an
// empty pool never reads as one group size for all).
struct GroupSpan {
  int min, max;
};
GroupSpan group_span(const std::vector<uint8_t>& group, const std::vector<uint8_t>& live);

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
// The bucket that pads, by the caller's order: of the buckets with samples in the pool and
// allowed(b), the first in index order that no other precedes (pads_before(a, b): a pads
// rather than b; a strict weak order). cheapest_bucket is this with (cost, highest index).
// Throws std::logic_error when no bucket qualifies.
size_t padding_bucket(const BucketedPool& pool, const std::function<bool(size_t b)>& allowed,
                      const std::function<bool(size_t a, size_t b)>& pads_before);

// A micro-batch count made a multiple of W by splits: while some are missing, split(missing)
// splits micro-batches into more (at most `missing` more) and returns how many it added, 0
// when none can be split. Returns the number still missing, for the caller to pad or drop.
// Throws std::logic_error when split adds more than it was asked for.
uint64_t split_to_multiple(uint64_t count, uint64_t W,
                           const std::function<uint64_t(uint64_t missing)>& split);

// Smaller micro-batches until the global batch's step count is met: from `have` steps, while
// have < target and at most max_passes times, shrink(have) cuts smaller and returns the step
// count it reaches, or nullopt when nothing shrinks further (or shrinking no longer helps).
// Returns the last count reached.
uint64_t shrink_to_steps(uint64_t target, uint64_t have, int max_passes,
                         const std::function<std::optional<uint64_t>(uint64_t have)>& shrink);

}  // namespace adaptiveload
