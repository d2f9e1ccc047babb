#pragma once
// Packed micro-batches (--packing on): a micro-batch holds samples of any buckets, concatenated
// into one token sequence in which each sample attends only to itself (docs/planner.md,
// "Packing"). The cost models price a pack by its shape (cost/shape.h): one overhead, the sum
// of its samples' work, the small-batch ramp on its total tokens, and pack_sample_s a sample
// (cost_model.h). A pack is bounded by the memory budget's tokens
// (PlanProblem::mem_budget_tokens, per GPU) and by device memory (PlanProblem::memory of its
// shape within usable_bytes).
#include <cstdint>
#include <vector>

#include "adaptiveload/strategy/balanced/problem.h"
#include "adaptiveload/strategy/stages.h"

namespace adaptiveload {

// The room one pack has, and what it holds so far.
struct PackRoom {
  int64_t max_tokens = 0;  // video tokens a pack may hold
  double max_bytes = 0;    // bytes its samples may add to the static ones
  double m0 = 0, m1 = 0;   // bytes per sample and per token (MemoryModel)

  // The room of the problem's packs. Throws ConfigError when the problem has no memory budget.
  static PackRoom of(const PlanProblem& pr);
  // Whether a sample of `tokens` joins a pack that holds `used_tokens` and `used_bytes`.
  bool fits(int64_t used_tokens, double used_bytes, int64_t tokens) const {
    return used_tokens + tokens <= max_tokens && used_bytes + sample_bytes(tokens) <= max_bytes;
  }
  double sample_bytes(int64_t tokens) const { return m0 + m1 * double(tokens); }
};

// Packs of the problem's pool as lists of sample ids (`ids`, pack-major; pack k is
// ids[begin[k], begin[k+1])): a greedy token-budget packer, the way THD packing is usually
// done: the pool shuffled, then each pack filled in that order until the next sample would
// take it past `target_tokens` (0: the room's) or out of the room (then a new pack; a sample
// always fits an empty one). Throws ConfigError for a sample that fits no pack.
struct Packs {
  std::vector<uint32_t> ids;
  std::vector<uint64_t> begin{0};
  uint64_t size() const { return begin.size() - 1; }
};
Packs greedy_packs(const PlanProblem& pr, const PackRoom& room, int64_t target_tokens = 0);

// The micro-batch of samples ids[0, n): bucket kPackedBucket when they are of several buckets,
// else their bucket (a pack of one bucket is a bucketed micro-batch).
uint16_t pack_bucket(const PlanProblem& pr, const uint32_t* ids, uint64_t n);

// Each bucket's per-sample cost in ticks (sample_ticks(...).per), by bucket index.
std::vector<Ticks> per_sample_ticks(const PlanProblem& pr);

// balanced with packing: every pack of every rank-step dealt to the same cost (so rank-steps
// in step sync and lockstep slots in micro sync are level alike); steps take a like mix of
// packs (stratified by tokens), holding the global batch.
Plan plan_balanced_packed(const BalancedProblem& pr);
// The greedy packer as a strategy: greedy_packs of the global batch's tokens per rank-step
// (free: of the memory budget), dealt in rounds of W packs (one a rank) to the K steps, the
// last round completed by padded repeats (or dropped).
Plan plan_greedy_pack(const PlanProblem& pr);

}  // namespace adaptiveload
