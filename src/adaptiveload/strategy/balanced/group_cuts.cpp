#include "adaptiveload/strategy/balanced/group_cuts.h"

#include <algorithm>
#include <string>

#include "adaptiveload/strategy/plan_writer.h"
#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {

GroupBuckets group_bucket_costs(const PlanProblem& pr) {
  const size_t nb = pr.buckets->size();
  GroupBuckets c;
  c.g.resize(nb), c.cap.resize(nb), c.per.resize(nb), c.fixed.resize(nb);
  for (size_t b = 0; b < nb; ++b) {
    const Bucket& bk = (*pr.buckets)[b];
    const int g = pr.group(uint16_t(b));
    c.g[b] = g;
    int64_t cap = std::max<int64_t>(1, pr.max_batch_memory[b]);
    if (pr.mem_budget_tokens > 0) {
      const int64_t per_gpu = (bk.tokens + g - 1) / g;
      cap = std::min<int64_t>(cap, std::max<int64_t>(1, pr.mem_budget_tokens / per_gpu));
    }
    c.cap[b] = std::min<int64_t>(cap, kMaxMicroBatch);
    const SampleTicks one = sample_ticks(pr, bk, g);
    c.per[b] = one.per;
    c.fixed[b] = one.fixed;
  }
  return c;
}

GroupItem group_item(const PlanProblem& pr, uint64_t begin, uint32_t count, uint16_t bucket,
                     int g) {
  GroupItem it;
  it.begin = begin, it.count = it.own = count, it.bucket = bucket, it.group = uint8_t(g);
  it.cost = group_ticks(pr, MicroShape::uniform(count, (*pr.buckets)[bucket]), g);
  return it;
}

// Cuts bucket b's samples [begin, end) into about equal micro-batches of at most B.
void cut_bucket(std::vector<GroupItem>& out, const GroupBuckets& c, const PlanProblem& pr, size_t b,
                uint64_t begin, uint64_t end, int64_t B) {
  const uint64_t n = end - begin;
  if (n == 0) return;
  B = std::max<int64_t>(1, std::min<int64_t>(B, c.cap[b]));
  const uint64_t k = (n + uint64_t(B) - 1) / uint64_t(B), q = n / k, extra = n % k;
  uint64_t at = begin;
  for (uint64_t i = 0; i < k; ++i) {
    const uint32_t cnt = uint32_t(q + (i < extra ? 1 : 0));
    out.push_back(group_item(pr, at, cnt, uint16_t(b), c.g[b]));
    at += cnt;
  }
}

// Splits a one-GPU, unchained item of two or more samples: it keeps the first half (rounded
// up) and returns the rest as a new item of the same bucket; both costs follow.
GroupItem split_half(GroupItem& src, const PlanProblem& pr) {
  GroupItem moved = src;
  const uint32_t half = src.count / 2;
  src.count -= half, src.own = src.count;
  moved.begin = src.begin + src.count, moved.count = moved.own = half;
  src.cost = group_ticks(pr, MicroShape::uniform(src.count, (*pr.buckets)[src.bucket]), src.group);
  moved.cost =
      group_ticks(pr, MicroShape::uniform(moved.count, (*pr.buckets)[moved.bucket]), moved.group);
  return moved;
}

// Largest batch of bucket b whose micro-batch takes at most `ticks` (at least 1).
int64_t batch_for(const GroupBuckets& c, size_t b, Ticks ticks) {
  // per >= 1 (to_ticks); the quotient of non-negative ticks is the floor.
  const Ticks x = ticks > c.fixed[b] ? (ticks - c.fixed[b]) / c.per[b] : 0;
  return std::max<int64_t>(1, std::min<int64_t>(x, c.cap[b]));
}

// Writes the plan from, per rank-step (step-major), its list of item indices: an item on a
// group of g ranks is listed on each of them, its ids written once.
Plan write_group_plan(const PlanProblem& pr, const BucketedPool& pool,
                      const std::vector<GroupItem>& items, const std::vector<uint64_t>& list_begin,
                      const std::vector<uint32_t>& lists, uint64_t steps) {
  const uint64_t W = uint64_t(pr.world_size);
  PlanWriter out(pr, "balanced", true);
  out.reserve(0, lists.size(), steps);
  std::vector<uint32_t> at(items.size(), UINT32_MAX);  // sample_ids offset once written
  for (uint64_t t = 0; t < steps; ++t)
    for (uint64_t r = 0; r < W; ++r) {
      for (uint64_t k = list_begin[t * W + r]; k < list_begin[t * W + r + 1]; ++k) {
        const uint32_t i = lists[k];
        const GroupItem& it = items[i];
        if (at[i] == UINT32_MAX) {
          at[i] = out.next_id();
          for (uint32_t j = i; j != UINT32_MAX; j = items[j].next)
            out.append_ids(pool.ids.data() + items[j].begin, items[j].own);
        }
        MicroBatch mb;
        mb.begin = at[i], mb.count = it.count, mb.bucket = it.bucket, mb.padded = it.padded;
        out.add(mb, it.group);
      }
      out.next_rank();
    }
  return out.finish();
}

// A padded repeat of one sample: the cheapest bucket of the smallest group size <= g.
GroupItem group_padding(const PlanProblem& pr, const BucketedPool& pool, const GroupBuckets& c,
                        int g) {
  auto cost_of = [&](size_t b) {
    return group_ticks(pr, MicroShape::uniform(1, (*pr.buckets)[b]), c.g[b]);
  };
  bool fits = false;
  for (size_t b = 0; b < c.g.size() && !fits; ++b)
    fits = pool.begin[b + 1] > pool.begin[b] && c.g[b] <= g;
  if (!fits)
    throw ConfigError("balanced: no sample fits a free block of " + std::to_string(g) + " ranks");
  // Smallest group first, then the cheapest; ties to the first bucket.
  const size_t b = padding_bucket(
      pool, [&](size_t x) { return c.g[x] <= g; },
      [&](size_t x, size_t y) {
        return c.g[x] != c.g[y] ? c.g[x] < c.g[y] : cost_of(x) < cost_of(y);
      });
  const SlotItem pad = padded_repeat(pool, b);
  GroupItem out;
  out.cost = cost_of(b), out.begin = pad.begin, out.count = out.own = pad.count,
  out.bucket = pad.bucket;
  out.group = uint8_t(c.g[b]), out.padded = pad.padded;
  return out;
}

}  // namespace adaptiveload
