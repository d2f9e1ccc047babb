#pragma once
// Plan-contract oracles shared by the planner and state targets (abort on violation).
#include <algorithm>
#include <vector>

#include "adaptiveload/planner/planner.h"
#include "fuzz_common.h"

namespace adaptiveload::fuzz {

// Ids trained in steps [first, end) (padded repeats excluded), unsorted.
inline void append_trained(const Plan& p, size_t first, size_t end, std::vector<uint32_t>& out) {
  end = std::min(end, p.num_steps());
  if (first >= end) return;
  const size_t W = size_t(p.world_size);
  // A sequence-parallel group's micro-batch is listed by each of its ranks: counted once.
  for (size_t i = first * W; i < end * W; ++i)
    for (uint64_t m = p.rank_begin[i]; m < p.rank_begin[i + 1]; ++m) {
      const MicroBatch& mb = p.micro_batches[m];
      if (!mb.padded && (i % W) % size_t(p.group(m)) == 0)
        out.insert(out.end(), p.ids(mb), p.ids(mb) + mb.count);
    }
}

inline std::vector<uint32_t> usable_ids(const Planner& pl) {
  const auto& sb = pl.bucketing().sample_bucket;
  std::vector<uint8_t> over(sb.size(), 0);
  for (const auto& o : pl.oversize()) over[size_t(o.row)] = 1;
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < sb.size(); ++i)
    if (sb[i] != kNoBucket && !over[i]) ids.push_back(uint32_t(i));
  return ids;
}

// Lockstep shape and coverage: every rank has >= 1 micro-batch in every step (so all ranks
// run the same number of steps), every usable sample is trained or dropped exactly once.
inline void check_plan(const Planner& pl, const Plan& p) {
  const size_t W = size_t(p.world_size);
  AL_FUZZ_CHECK(p.rank_begin.size() == p.num_steps() * W + 1, "rank_begin is not steps x W + 1");
  AL_FUZZ_CHECK(p.rank_begin.back() == p.micro_batches.size(),
                "rank_begin does not end at the micro-batches");
  for (size_t i = 0; i + 1 < p.rank_begin.size(); ++i)
    AL_FUZZ_CHECK(p.rank_begin[i] < p.rank_begin[i + 1],
                  "a rank is idle in a step (ranks out of lockstep)");
  // A step counts its trained samples and, beside them, its padded repeats.
  uint64_t samples = 0, padded = 0;
  for (const StepInfo& s : p.steps) samples += s.samples, padded += s.padded;
  AL_FUZZ_CHECK(samples + padded == p.sample_ids.size(), "step sample counts do not add up");
  AL_FUZZ_CHECK(padded == p.padded_samples, "step padded counts do not add up to the plan's");
  AL_FUZZ_CHECK(p.mb_group.empty() || p.mb_group.size() == p.micro_batches.size(),
                "group sizes do not match");
  for (size_t i = 0; i < p.mb_group.size(); ++i)
    AL_FUZZ_CHECK(p.mb_group[i] >= 1 && W % p.mb_group[i] == 0,
                  "a group size does not divide the world size");
  for (const MicroBatch& mb : p.micro_batches) {
    AL_FUZZ_CHECK(mb.count > 0 && uint64_t(mb.begin) + mb.count <= p.sample_ids.size(),
                  "micro-batch out of range");
    if (mb.bucket == kPackedBucket) {
      // A pack: samples of several buckets, on one GPU, within the token budget and memory.
      AL_FUZZ_CHECK(p.packed, "a pack in a plan not marked packed");
      MicroShape shape;
      for (uint32_t k = 0; k < mb.count; ++k) {
        const uint16_t b = pl.bucketing().sample_bucket[p.ids(mb)[k]];
        AL_FUZZ_CHECK(b < pl.bucketing().buckets.size(), "a packed sample has no bucket");
        shape.add(pl.bucketing().buckets[b]);
      }
      AL_FUZZ_CHECK(shape.parts().size() > 1, "a pack of one bucket does not keep its bucket");
      AL_FUZZ_CHECK(shape.tokens() <= pl.mem_budget_tokens(), "a pack over the token budget");
      AL_FUZZ_CHECK(pl.memory().bytes(shape) <= pl.usable_memory_bytes(),
                    "a pack over device memory");
      continue;
    }
    for (uint32_t k = 0; k < mb.count; ++k)
      AL_FUZZ_CHECK(pl.bucketing().sample_bucket[p.ids(mb)[k]] == mb.bucket,
                    "sample in the wrong bucket");
  }
  std::vector<uint32_t> ids;
  append_trained(p, 0, p.num_steps(), ids);
  ids.insert(ids.end(), p.dropped.begin(), p.dropped.end());
  std::sort(ids.begin(), ids.end());
  AL_FUZZ_CHECK(ids == usable_ids(pl), "coverage: not every usable sample exactly once");
}

// Nothing lost or repeated across the segments of `st` and its resumption on `world_size`
// ranks: the steps done in each segment (replayed through prefix states) plus the rest of
// the resumed plan (and its dropped samples) are the usable samples, each exactly once.
inline void check_resume_coverage(const Planner& pl, const PlanState& st, int world_size) {
  std::vector<uint32_t> ids;
  Planner::Resumed last;
  for (size_t k = 0; k < st.segments.size(); ++k) {
    PlanState prefix = st;
    prefix.segments.resize(k + 1);
    Planner::Resumed r = pl.resume(prefix, prefix.segments.back().first);
    AL_FUZZ_CHECK(r.first_step == size_t(prefix.segments.back().second),
                  "prefix resume at the wrong step");
    append_trained(r.plan, 0, r.first_step, ids);
  }
  Planner::Resumed r = pl.resume(st, world_size);
  append_trained(r.plan, r.first_step, r.plan.num_steps(), ids);
  ids.insert(ids.end(), r.plan.dropped.begin(), r.plan.dropped.end());
  std::sort(ids.begin(), ids.end());
  AL_FUZZ_CHECK(ids == usable_ids(pl), "resume: a sample was lost or repeated");
}

}  // namespace adaptiveload::fuzz
