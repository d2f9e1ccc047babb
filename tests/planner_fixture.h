#pragma once
// Shared helpers of the planner tests: real manifests and plan invariants.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "adaptiveload/plan/plan_io.h"
#include "adaptiveload/planner/planner.h"
#include "test_paths.h"

namespace adaptiveload::test {

inline Manifest real_manifest() {
  Manifest m;
  m.load(data_file("taichi_hd.csv"), BadRowPolicy::kError);
  m.load(data_file("coco2017_val_images.csv"), BadRowPolicy::kError);
  return m;
}

inline std::string jsonl(const Plan& p, size_t first = 0) {
  std::ostringstream s;
  write_plan_jsonl(p, s, first);
  return s.str();
}

// Ids a plan trains (padded repeats excluded), sorted.
inline std::vector<uint32_t> trained_ids(const Plan& p, size_t first_step = 0,
                                         size_t end_step = SIZE_MAX) {
  std::vector<uint32_t> ids;
  end_step = std::min(end_step, p.num_steps());
  if (first_step >= end_step) return ids;
  const size_t W = size_t(p.world_size);
  // A sequence-parallel group's micro-batch is listed by each of its ranks: counted once, at
  // the group's first rank.
  for (size_t i = first_step * W; i < end_step * W; ++i)
    for (uint64_t m = p.rank_begin[i]; m < p.rank_begin[i + 1]; ++m) {
      const MicroBatch& mb = p.micro_batches[m];
      if (!mb.padded && (i % W) % size_t(p.group(m)) == 0)
        ids.insert(ids.end(), p.ids(mb), p.ids(mb) + mb.count);
    }
  std::sort(ids.begin(), ids.end());
  return ids;
}

inline std::vector<uint32_t> usable_ids(const Planner& pl) {
  std::vector<uint32_t> ids;
  const auto& sb = pl.bucketing().sample_bucket;
  std::vector<uint8_t> over(sb.size(), 0);
  for (const auto& o : pl.oversize()) over[size_t(o.row)] = 1;
  for (size_t i = 0; i < sb.size(); ++i)
    if (sb[i] != kNoBucket && !over[i]) ids.push_back(uint32_t(i));
  return ids;
}

// The plan contract: every usable sample exactly once (trained or dropped), every rank has
// work in every step, micro-batches within their budgets.
inline void expect_plan_contract(const Planner& pl, const Plan& p, const std::string& ctx) {
  std::vector<uint32_t> ids = trained_ids(p);
  ids.insert(ids.end(), p.dropped.begin(), p.dropped.end());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, usable_ids(pl)) << ctx << ": coverage (each usable sample exactly once)";
  const size_t W = size_t(p.world_size);
  ASSERT_EQ(p.rank_begin.size(), p.num_steps() * W + 1) << ctx;
  const auto& buckets = pl.bucketing().buckets;
  const double usable = pl.usable_memory_bytes();
  for (size_t i = 0; i + 1 < p.rank_begin.size(); ++i)
    ASSERT_LT(p.rank_begin[i], p.rank_begin[i + 1])
        << ctx << ": rank " << i % W << " idle in step " << i / W;
  for (size_t m = 0; m < p.micro_batches.size(); ++m) {
    const MicroBatch& mb = p.micro_batches[m];
    if (mb.bucket == kPackedBucket) {
      // A pack (samples of several buckets, one GPU): within M_mem tokens and device memory.
      ASSERT_TRUE(p.packed) << ctx << ": a pack in a plan not marked packed";
      ASSERT_EQ(p.group(m), 1) << ctx << ": a pack on a sequence-parallel group";
      MicroShape shape;
      for (uint32_t k = 0; k < mb.count; ++k)
        shape.add(buckets[pl.bucketing().sample_bucket[p.ids(mb)[k]]]);
      ASSERT_GT(shape.parts().size(), 1u) << ctx << ": a pack of one bucket keeps its bucket";
      EXPECT_LE(shape.tokens(), pl.mem_budget_tokens()) << ctx << ": pack over M_mem";
      EXPECT_LE(pl.memory().bytes(shape), usable) << ctx << ": pack over device memory";
      continue;
    }
    const Bucket& b = buckets[mb.bucket];
    // On a sequence-parallel group of g, a rank holds S / g tokens of each sample.
    const int g = p.group(m);
    const int64_t per_gpu = (b.tokens + g - 1) / g;
    ASSERT_GT(mb.count, 0u) << ctx;
    for (uint32_t k = 0; k < mb.count; ++k)
      ASSERT_EQ(pl.bucketing().sample_bucket[p.ids(mb)[k]], mb.bucket)
          << ctx << ": sample in the wrong bucket";
    // `fixed` follows its table (capped at device memory), not the token budget.
    if (p.strategy != "fixed") {
      EXPECT_LE(int64_t(mb.count) * per_gpu, pl.mem_budget_tokens())
          << ctx << ": B x S / g over M_mem in " << b.name();
    }
    EXPECT_LE(pl.memory().bytes(mb.count, per_gpu), usable)
        << ctx << ": micro-batch over device memory";
    // dual obeys M_comp; balanced's whole-batch candidates may use the memory budget's sizes
    // (its dealing balances them), so it is held to M_mem and memory above.
    if (p.strategy == "dual" && mb.count > 1 && g == 1) {
      EXPECT_LE(double(mb.count) * std::pow(double(b.tokens), pl.p()),
                pl.comp_budget() * (1 + 1e-12))
          << ctx << ": B x S^p over M_comp in " << b.name();
    }
  }
  // A step counts its trained samples and, beside them, its padded repeats.
  uint64_t samples = 0, padded = 0;
  for (const StepInfo& s : p.steps) samples += s.samples, padded += s.padded;
  EXPECT_EQ(samples + padded, p.sample_ids.size()) << ctx;
  EXPECT_EQ(padded, p.padded_samples) << ctx;
}

}  // namespace adaptiveload::test
