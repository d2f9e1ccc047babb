#pragma once
// balanced on sequence-parallel groups of different sizes (strategy/sp_groups.cpp): cutting
// each bucket into micro-batches on its group, the padded repeat that fills a free block, and
// writing the plan from per-rank-step lists of these micro-batches. Costs are ticks on the
// micro-batch's group (stages.h: the cost model's seconds rounded once), so every decision is
// integer arithmetic, as in balanced's plain path.
#include <cstdint>
#include <vector>

#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

// A micro-batch being placed on its group of ranks (a piece of one, once merged).
struct GroupItem {
  Ticks cost = 0;              // on its group
  uint64_t begin = 0;          // into the bucketed pool's ids (or the padding source)
  uint32_t count = 0;          // samples, over the chain of merged items
  uint32_t own = 0;            // of which in [begin, begin + own)
  uint32_t next = UINT32_MAX;  // merged: the next item of this micro-batch
  uint16_t bucket = 0;
  uint8_t group = 1;
  uint8_t padded = 0;
  uint8_t merged = 0;  // part of an earlier item's micro-batch
};

struct GroupBuckets {
  std::vector<int> g;
  std::vector<int64_t> cap;       // largest micro-batch
  std::vector<Ticks> per, fixed;  // per sample, fixed per micro-batch
};

// A micro-batch of `count` samples of bucket b from position `begin` of the bucketed pool, on a
// group of g ranks, priced there (group_ticks).
GroupItem group_item(const PlanProblem& pr, uint64_t begin, uint32_t count, uint16_t bucket, int g);
// Per bucket: its group size, the largest micro-batch that fits (memory, M_mem) and its
// ticks per sample and fixed ticks per micro-batch on that group.
GroupBuckets group_bucket_costs(const PlanProblem& pr);
// Cuts bucket b's samples [begin, end) of the bucketed pool into about equal micro-batches of
// at most B (and the bucket's cap), appended to `out`.
void cut_bucket(std::vector<GroupItem>& out, const GroupBuckets& c, const PlanProblem& pr, size_t b,
                uint64_t begin, uint64_t end, int64_t B);
// Splits a one-GPU, unchained item of two or more samples: it keeps the first half (rounded
// up) and returns the rest as a new item of the same bucket; both costs follow.
GroupItem split_half(GroupItem& src, const PlanProblem& pr);
// Largest batch of bucket b whose micro-batch takes at most `ticks` (at least 1, at most the
// cap).
int64_t batch_for(const GroupBuckets& c, size_t b, Ticks ticks);
// Writes the plan from, per rank-step (step-major), its list of item indices.
Plan write_group_plan(const PlanProblem& pr, const BucketedPool& pool,
                      const std::vector<GroupItem>& items, const std::vector<uint64_t>& list_begin,
                      const std::vector<uint32_t>& lists, uint64_t steps);
// A padded repeat of one sample for a free aligned block of g ranks: the cheapest bucket of the
// smallest group size <= g. Throws ConfigError when no bucket's group fits.
GroupItem group_padding(const PlanProblem& pr, const BucketedPool& pool, const GroupBuckets& c,
                        int g);

}  // namespace adaptiveload
