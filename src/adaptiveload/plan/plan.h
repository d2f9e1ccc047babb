#pragma once
// A plan: for every global step of one epoch, each rank's micro-batches as lists of manifest
// row ids. Stored flat so 10M samples cost a few bytes each:
//   sample_ids     step-major, then rank, then micro-batch
//   micro_batches  step-major, then rank; each a range of sample_ids
//   rank_begin     [steps * W + 1] micro-batch range of (step, rank)
//   mb_group       per micro-batch, its sequence-parallel group size g (empty: all 1). The
//                  group is the aligned block of g ranks holding the rank; every rank of it
//                  lists the micro-batch (the same sample_ids range), in the same order:
//                  in step sync a rank's list runs its groups from the largest g down, in
//                  micro sync the ranks of a group hold it in the same slot.
#include <cstdint>
#include <string>
#include <vector>

#include "adaptiveload/plan/layout.h"

namespace adaptiveload {

// End-of-epoch policy. Ranks run in lockstep, so every rank needs the same number of steps.
// kPad: a final step that cannot give every rank work is completed with repeats of samples
//       from the start of the epoch, flagged `padded` (DistributedSampler's behaviour).
// kDrop: such a final step is dropped and its samples are counted as dropped.
enum class EndPolicy { kPad, kDrop };

// MicroBatch::bucket of a packed micro-batch, whose samples may be of several buckets (each
// sample's own bucket gives the micro-batch's shape; sim/metrics.h micro_shape).
constexpr uint16_t kPackedBucket = 0xffff;

struct MicroBatch {
  uint32_t begin = 0;  // into Plan::sample_ids
  uint32_t count = 0;
  uint16_t bucket = 0;  // the bucket of every sample, or kPackedBucket
  uint8_t padded = 0;   // 1: repeats earlier samples to keep ranks in lockstep
};

struct StepInfo {
  // Over all ranks, padded repeats excluded: what a trainer that skips the padded micro-batches
  // normalises its loss by (one that trains them too adds `padded`).
  uint64_t tokens = 0;   // video tokens of the step's trained samples
  uint32_t samples = 0;  // trained samples of the step
  uint32_t padded = 0;   // padded repeats in the step, beside `samples`
};

// Counts a micro-batch of `count` samples and `tokens` video tokens in all into a step: as
// padded repeats or as trained.
inline void add_to_step(StepInfo& s, uint32_t count, uint64_t tokens, bool padded) {
  if (padded) {
    s.padded += count;
  } else {
    s.samples += count;
    s.tokens += tokens;
  }
}

struct Plan {
  std::string strategy;
  int world_size = 1;
  SyncMode sync = SyncMode::kStep;  // micro: every rank has the same micro-batch count per step
  std::vector<uint32_t> sample_ids;
  std::vector<MicroBatch> micro_batches;
  std::vector<uint64_t> rank_begin{0};
  std::vector<StepInfo> steps;
  int64_t padded_samples = 0;
  std::vector<uint32_t> dropped;  // sample ids dropped by the end-of-epoch policy
  std::vector<uint8_t> mb_group;  // per micro-batch SP group size; empty: no sequence parallelism
  bool packed = false;  // planned with packing: micro-batches may be packs (kPackedBucket)

  size_t num_steps() const { return steps.size(); }
  // Micro-batch index range [first, last) of rank r in step t.
  std::pair<uint64_t, uint64_t> rank_range(size_t step, int rank) const {
    size_t i = step * size_t(world_size) + size_t(rank);
    return {rank_begin[i], rank_begin[i + 1]};
  }
  const uint32_t* ids(const MicroBatch& mb) const { return sample_ids.data() + mb.begin; }
  int group(uint64_t m) const { return mb_group.empty() ? 1 : int(mb_group[m]); }
};

}  // namespace adaptiveload
