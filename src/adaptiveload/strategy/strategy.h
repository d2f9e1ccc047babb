#pragma once
// Batching strategies. Each is a pure function of a PlanProblem (one file per strategy, one
// line in strategy_registry.cpp): same problem, same plan, byte for byte.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/geometry/geometry.h"
#include "adaptiveload/plan/layout.h"
#include "adaptiveload/plan/plan.h"

namespace adaptiveload {

// The global batch the user asked for, as a rate the planner keeps per global step.
//   kFree     balanced picks its step count to minimise the epoch time; the one-micro-batch
//             strategies run one micro-batch per rank per step (their batch sizes decide).
//   kSamples  about `batch_target` samples per global step (over all ranks).
//   kTokens   about `batch_target` video tokens per global step.
enum class BatchKind : uint8_t { kFree = 0, kSamples = 1, kTokens = 2 };

// balanced in step sync with a global batch keeps two invariants (strategy/balanced/,
// with BalancedProblem::hold; Planner::warnings reports a miss): tokens (samples
// for samples:N) per step within kMaxBatchDev of their mean, and at most kMaxUnmixed of the
// steps without an image, or without a clip, where the pool has one of them for every step.
constexpr double kMaxBatchDev = 0.10;
// balanced holds the global batch where that costs at most this share of the epoch: packed,
// between its layouts (strategy/packing.cpp) and against its bucketed plan (its driver,
// strategy/balanced/drive.cpp); on sequence-parallel groups in step sync, between the group
// assignments it tries (run_balanced_groups).
constexpr double kHoldCost = 0.05;
constexpr double kMaxUnmixed = 0.05;
constexpr uint8_t kHoldBatch = 1, kHoldMix = 2;

struct PlanProblem {
  const std::vector<Bucket>* buckets = nullptr;
  const std::vector<uint16_t>* sample_bucket = nullptr;  // per sample id (kNoBucket: skip)
  std::vector<uint32_t> pool;  // sample ids to plan this epoch, ascending (or pool_view)
  const std::vector<uint32_t>* pool_view = nullptr;  // when set, the pool (not copied)
  const std::vector<uint32_t>& pool_ids() const { return pool_view ? *pool_view : pool; }
  const CostModel* cost = nullptr;  // what the planner believes a micro-batch costs
  int world_size = 1;
  uint64_t seed = 0;
  int64_t epoch = 0;
  uint64_t segment = 0;  // elastic-resume segment: 0 for an uninterrupted epoch
  EndPolicy end_policy = EndPolicy::kPad;

  // Budgets, resolved by the planner (see planner.h) before any strategy runs.
  std::vector<int64_t>
      max_batch_memory;  // per bucket: largest B that fits device memory (on its group)
  // Sequence parallelism: per bucket, the group size g its samples run on (empty: all 1).
  // Only balanced plans buckets of different g together (plan_balanced_groups); the planner
  // hands the other strategies one g for all, as W / g ranks (run_common, context.h).
  std::vector<uint8_t> bucket_group;
  int group(uint16_t bucket) const { return bucket_group.empty() ? 1 : int(bucket_group[bucket]); }
  int64_t mem_budget_tokens = 0;     // M_mem: B * S <= M_mem
  bool mem_budget_auto = false;      // M_mem resolved from memory (--mem-budget auto)
  double comp_budget = 0;            // M_comp: B * S^p <= M_comp (0: none)
  double p = 2;                      // the paper's exponent
  double step_budget_s = 0;          // balanced: most seconds of work per rank per step
  double allreduce_s = 0;            // step mode: gradient all-reduce per step, seconds
  std::vector<int64_t> fixed_batch;  // per bucket, for `fixed`
  ParallelLayout layout;             // sync mode and its collectives
  // Seconds every global step adds beside its micro-batches: the gradient all-reduce (step
  // mode) and the step's fixed seconds (the optimizer step, ParallelLayout::step_fixed_s).
  double step_seconds() const { return allreduce_s + layout.step_fixed_s; }
  BatchKind batch_kind = BatchKind::kFree;
  double batch_target = 0;  // samples or tokens per global step
  // The plan layout release to plan as (PlanState::kLayout, 3): a state saved by an earlier
  // release resumes its epoch as that release planned it (PlanState::layout).
  int layout_release = 3;
  // Release 3, on ranks that are not alike: lumped steps and slots, and a faster device's
  // micro-batch sizes grown with its speed (strategy/balanced/rank_speeds.h).
  bool lumped_layouts() const { return layout_release >= 3; }
  // Memory of a micro-batch by its shape, and what a device may fill (packs are bounded by
  // them, strategy/packing.h).
  MemoryModel memory;
  double usable_bytes = 0;
  // Ranks that are not alike (--devices): per rank the bytes its device may fill (empty: every
  // rank usable_bytes, the reference device's). Speeds are in layout.rank_speed.
  std::vector<double> rank_usable_bytes;

  int64_t tokens(uint16_t bucket) const { return (*buckets)[bucket].tokens; }
  // Video tokens of micro-batch mb of `plan`: its count times its bucket's, or for a packed
  // micro-batch (kPackedBucket) the sum over its samples' buckets.
  int64_t tokens(const Plan& plan, const MicroBatch& mb) const;
  // Global steps this problem's pool should take under the global batch (0 for kFree): the
  // pool's samples (or tokens) over the target, rounded, at least 1.
  uint64_t target_steps() const;
  // The pool's samples (batch_kind kSamples) or video tokens (otherwise): what the global
  // batch divides into steps.
  double batch_total() const;
};

// The strategy registry (strategy_registry.cpp): the one list of strategy names and of what
// each strategy does, read by the planner, the CLI (--strategy's help and check, the
// comparison), the report, the Python binding (_C.strategies()), the fuzzers and the tests.
// Bits of StrategyEntry::sync_modes: the sync modes (plan/layout.h) a strategy plans for.
constexpr uint8_t kServesStep = 1u << uint8_t(SyncMode::kStep);
constexpr uint8_t kServesMicro = 1u << uint8_t(SyncMode::kMicro);
constexpr uint8_t kServesBoth = kServesStep | kServesMicro;
// Bits of StrategyEntry::traits.
//   kMixesGroups      plans samples of different sequence-parallel group sizes together
//                     (plan_balanced_groups); the others run every sample on the largest
//                     group any sample needs (run_common, context.h).
//   kNeedsFixedBatch  needs per-bucket batch sizes (PlanProblem::fixed_batch, --fixed-config
//                     or the grid's); left out of a comparison where they miss a bucket.
//   kBaseline         the comparison's reference: speedups are samples/s over its samples/s.
//   kPacks            plans packed micro-batches only (samples of any buckets in one, strategy/
//                     packing.h), whatever --packing says; `--strategy all` lists it only with
//                     --packing on.
//   kPacksWhenAsked   plans packed micro-batches with --packing on (PlanContext::packing),
//                     bucketed ones without; a comparison with packing on shows both.
//   kHoldsBatch       in step sync with a global batch, keeps the tokens per step and the
//                     step mix (BalancedProblem::hold) where a layout it tries does; Planner::
//                     warnings says where its plan misses them.
constexpr uint8_t kMixesGroups = 1, kNeedsFixedBatch = 2, kBaseline = 4, kPacks = 8,
                  kPacksWhenAsked = 16, kHoldsBatch = 32;

struct PlanContext;  // context.h: what the planner lends every strategy beside its problem

struct StrategyEntry {
  const char* name;
  const char* summary;
  Plan (*fn)(const PlanProblem&);
  uint8_t sync_modes = kServesBoth;
  uint8_t traits = 0;
  // The strategy's own driver, which the planner calls as it calls every strategy
  // (drive(), context.h): balanced's composes its paths (balanced/drive.h). Null: run_common
  // (fn on the problem, on groups of one size where samples need them).
  Plan (*run)(const StrategyEntry&, const PlanProblem&, const PlanContext&) = nullptr;
  bool serves(SyncMode m) const { return (sync_modes >> uint8_t(m)) & 1u; }
  bool mixes_groups() const { return traits & kMixesGroups; }
  bool needs_fixed_batch() const { return traits & kNeedsFixedBatch; }
  bool baseline() const { return traits & kBaseline; }
  bool packs() const { return traits & kPacks; }
  bool packs_when_asked() const { return traits & kPacksWhenAsked; }
  bool holds_batch() const { return traits & kHoldsBatch; }
};

// Built-in strategies first, in registry order, then those added by register_strategy.
const std::vector<StrategyEntry>& strategies();
const StrategyEntry& find_strategy(const std::string& name);  // throws ConfigError
// Adds a strategy after the built-in ones (an out-of-tree strategy, a test's). Throws
// ConfigError when the name is taken or empty. Call it before planning: the registry is not
// guarded against concurrent readers.
void register_strategy(const StrategyEntry& entry);
// Removes a strategy added by register_strategy (tests); false when there is none of that name.
bool unregister_strategy(const std::string& name);
// The registered names joined: "equal_tokens, fixed, dual, balanced" (`last` before the
// final one: ", " or " or "); `only` keeps the entries it accepts (null: all).
std::string strategy_names(const char* sep = ", ", const char* last = ", ",
                           bool (*only)(const StrategyEntry&) = nullptr);
// The strategy speedups are measured against ("" when none is marked baseline).
std::string baseline_strategy();

Plan plan_equal_tokens(const PlanProblem& pr);
Plan plan_fixed(const PlanProblem& pr);
Plan plan_dual(const PlanProblem& pr);
Plan plan_balanced(const PlanProblem& pr);

// Shared by the bucket-loader strategies: groups the pool by bucket, shuffles each bucket,
// cuts it into batches of batch_of_bucket[b] samples (the last one partial), shuffles the
// batch order and deals them W at a time into "slots" (one micro-batch per rank). The
// end-of-epoch policy completes or drops a final slot with fewer than W batches. Slots are
// then grouped into the global batch's steps (steps_of_slots); with kFree, one per step.
// Every rank runs the same number of micro-batches in every step, so these plans suit both
// sync modes.
Plan plan_lockstep(const PlanProblem& pr, const std::vector<int64_t>& batch_of_bucket,
                   const char* name);

// A micro-batch being placed: `count` samples of `bucket` starting at ids[begin] of the
// bucketed pool (or of the padding list when padded).
struct SlotItem {
  uint64_t begin = 0;
  uint32_t count = 0;
  uint16_t bucket = 0;
  uint8_t padded = 0;
};

// Step of the i-th item (by descending key) dealt in a snake over `steps` steps: 0, 1, ..,
// steps-1, steps-1, .., 1, 0, 0, 1, ..; each step gets one item of every run of `steps`.
inline uint64_t snake_step(uint64_t i, uint64_t steps) {
  const uint64_t row = i / steps, col = i % steps;
  return row % 2 == 0 ? col : steps - 1 - col;
}

// Groups `slots` slots into global steps: kFree keeps one slot per step in the given order;
// otherwise K = min(target_steps, slots) steps of floor or ceil(slots / K) slots each, the
// slots dealt in a snake over the steps by descending `key` (samples or tokens of the slot),
// so that every step gets a like mix and about the same global batch; then the step order
// is shuffled. Returns the slot order and step_begin (K + 1 offsets into it).
struct SlotSteps {
  std::vector<uint32_t> order;
  std::vector<uint64_t> step_begin;
};
// How many steps steps_of_slots makes of `slots` slots for `target` steps (0: free, one a
// slot), for the estimates that price every step before the slots exist.
inline uint64_t slot_step_count(uint64_t slots, uint64_t target) {
  return target == 0 ? slots : std::min(target, slots);
}
// last_at_end: the last slot (padded at the epoch's end) goes into the last step.
SlotSteps steps_of_slots(const PlanProblem& pr, const std::vector<uint64_t>& key, uint64_t steps,
                         uint64_t purpose, bool last_at_end = false);

// Writes a plan from slots of W items each (slot-major; item r of a slot runs on rank r):
// step t gives rank r item r of each of the step's slots, in order.
Plan plan_from_slots(const PlanProblem& pr, const char* name, const std::vector<uint32_t>& ids,
                     const std::vector<SlotItem>& items, const SlotSteps& steps);

// Dual-constraint batch size of every bucket: floor(min(M_mem / S, M_comp / S^p)), at least 1,
// never more than fits in memory.
std::vector<int64_t> dual_batch_sizes(const PlanProblem& pr);

// A bucket loader's batch size of every bucket under the memory budget: floor(M_mem / S),
// at least 1, never more than fits in memory (equal_tokens; also the global batch's "auto").
std::vector<int64_t> equal_tokens_batch_sizes(const PlanProblem& pr);

// Pool sample ids grouped by bucket (bucket-major, each bucket shuffled with the problem's
// seed, epoch and segment); begin[b]..begin[b+1] is bucket b.
struct BucketedPool {
  std::vector<uint32_t> ids;
  std::vector<uint64_t> begin;
};
BucketedPool shuffled_by_bucket(const PlanProblem& pr);

// RNG purposes: one independent stream per use.
enum RngPurpose : uint64_t {
  kPurposeBucketShuffle = 1,
  kPurposeBatchOrder = 2,
  kPurposeBalancedDraw = 3,
  kPurposeStepOrder = 4,
  kPurposeSlotRanks = 5,
  kPurposeGreedyPack = 6,
  kPurposeLevelSteps = 7
};

}  // namespace adaptiveload
