#include <algorithm>
#include <cmath>
#include <vector>

#include "adaptiveload/strategy/balanced/balanced.h"
#include "adaptiveload/strategy/plan_writer.h"
#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/rng.h"

namespace adaptiveload {

// balanced in micro sync mode (FSDP, ZeRO-2/3): the ranks meet at every micro-batch, so a
// step is m "slots" of W micro-batches (one per rank) and each slot takes as long as its
// slowest micro-batch plus its exposed collectives. Micro-batches are cut per bucket at a
// size chosen for a target cost tau (the most samples whose micro-batch costs at most tau,
// within the dual-constraint cap; a sample costlier than tau alone is its own micro-batch);
// all micro-batches are sorted by cost and cut W at a time into slots, which minimises the
// sum of the slot maxima for that set (every slot holds W of nearly equal cost). The count is
// made a multiple of W by splitting the costliest micro-batches in two (else the last slot is
// padded or dropped). tau is searched over the buckets' natural levels and a geometric grid
// for the shortest epoch, computed from per-bucket counts (no pass over the samples); the
// dual-constraint sizes themselves are one candidate. Slots are then grouped into the global
// batch's steps (steps_of_slots): each step's ranks run the same number of micro-batches.
// long-function: the tau search ranks candidate cuts computed from per-bucket counts; the ranking
// and the expansion of the winner share the groups
MicroCut cut_for_slots(const PlanProblem& pr, const BucketedPool& pool,
                       const std::vector<uint64_t>& from, uint64_t target,
                       const std::vector<std::vector<int64_t>>& sizes) {
  const int W = pr.world_size;
  const uint64_t w = uint64_t(W);
  const size_t nb = pr.buckets->size();
  const std::vector<int64_t> cap = dual_batch_sizes(pr);
  std::vector<int64_t> per(nb), fixed(nb);
  std::vector<uint64_t> count(nb);
  std::vector<size_t> live;
  for (size_t b = 0; b < nb; ++b) {
    const Bucket& bk = (*pr.buckets)[b];
    const SampleTicks one = sample_ticks(pr, bk);
    per[b] = one.per;
    fixed[b] = one.fixed;
    count[b] = pool.begin[b + 1] - from[b];
    if (count[b]) live.push_back(b);
  }
  MicroCut out;
  if (live.empty()) return out;
  // A group: `mult` micro-batches of `n` samples of bucket b.
  struct Group {
    int64_t cost;
    uint16_t b;
    uint32_t n;
    uint64_t mult;
  };
  auto cost_of = [&](size_t b, int64_t n) { return fixed[b] + n * per[b]; };
  auto exposed = [&](int64_t c) {
    const double e = pr.layout.exposed_slot_comm(double(c) * 1e-9);
    return e > 0 ? to_ticks(e) : int64_t(0);
  };
  // The groups of batch sizes B (per bucket), their count made a multiple of W by splits.
  auto groups_of = [&](const std::vector<int64_t>& B, uint64_t& pad) {
    std::vector<Group> g;
    uint64_t mbs = 0;
    for (size_t b : live) {
      const uint64_t q = count[b] / uint64_t(B[b]), r = count[b] % uint64_t(B[b]);
      if (q) g.push_back({cost_of(b, B[b]), uint16_t(b), uint32_t(B[b]), q});
      if (r) g.push_back({cost_of(b, int64_t(r)), uint16_t(b), uint32_t(r), 1});
      mbs += q + (r ? 1 : 0);
    }
    pad = split_to_multiple(mbs, w, [&](uint64_t missing) -> uint64_t {
      // Split micro-batches of the costliest group with at least two samples.
      size_t best = g.size();
      for (size_t i = 0; i < g.size(); ++i)
        if (g[i].n >= 2 && (best == g.size() || g[i].cost > g[best].cost)) best = i;
      if (best == g.size()) return 0;
      const Group x = g[best];
      const uint64_t take = std::min<uint64_t>(x.mult, missing);
      g[best].mult -= take;
      const uint32_t hi = (x.n + 1) / 2, lo = x.n / 2;
      if (hi == lo) {
        g.push_back({cost_of(x.b, hi), x.b, hi, 2 * take});
      } else {
        g.push_back({cost_of(x.b, hi), x.b, hi, take});
        g.push_back({cost_of(x.b, lo), x.b, lo, take});
      }
      g.erase(std::remove_if(g.begin(), g.end(), [](const Group& y) { return y.mult == 0; }),
              g.end());
      return take;
    });
    std::stable_sort(g.begin(), g.end(), [](const Group& x, const Group& y) {
      return x.cost != y.cost ? x.cost > y.cost : x.b < y.b;
    });
    return g;
  };
  // Epoch ticks: every W-th micro-batch in cost order leads a slot.
  auto epoch_of = [&](const std::vector<Group>& g) {
    int64_t total = 0;
    uint64_t pos = 0;
    for (const Group& x : g) {
      const uint64_t first = (pos + w - 1) / w, last = (pos + x.mult + w - 1) / w;  // slots led
      total += int64_t(last - first) * (x.cost + exposed(x.cost));
      pos += x.mult;
    }
    return total;
  };
  std::vector<int64_t> taus;
  int64_t lo_t = INT64_MAX, hi_t = 0;
  for (size_t b : live) {
    const int64_t full = cost_of(b, std::min<int64_t>(cap[b], int64_t(count[b])));
    taus.push_back(full);
    lo_t = std::min(lo_t, cost_of(b, 1));
    hi_t = std::max(hi_t, full);
  }
  constexpr int kGrid = 24;
  for (int i = 0; i < kGrid && hi_t > lo_t; ++i)
    taus.push_back(
        int64_t(double(lo_t) * std::pow(double(hi_t) / double(lo_t), double(i) / (kGrid - 1))));
  std::sort(taus.begin(), taus.end());
  taus.erase(std::unique(taus.begin(), taus.end()), taus.end());
  // Candidates are ranked by: slots short of the target (the global batch's step count: each
  // step needs one slot or more), then padded slots, then the epoch time.
  struct Rank {
    uint64_t shortfall, pad;
    int64_t ticks;
    bool operator<(const Rank& o) const {
      return shortfall != o.shortfall ? shortfall < o.shortfall
             : pad != o.pad           ? pad < o.pad
                                      : ticks < o.ticks;
    }
  };
  // Each step also runs the optimizer once: one step a slot (free), else the global batch's.
  const int64_t step_ticks = pr.step_seconds() > 0 ? to_ticks(pr.step_seconds()) : 0;
  auto rank_of = [&](const std::vector<Group>& g, uint64_t pad) {
    uint64_t mbs = pad;
    for (const Group& x : g) mbs += x.mult;
    const uint64_t slots = (mbs + w - 1) / w;
    return Rank{target > slots ? target - slots : 0, pad,
                epoch_of(g) + int64_t(slot_step_count(slots, target)) * step_ticks};
  };
  uint64_t best_pad = 0;
  std::vector<Group> best_g = groups_of(cap, best_pad);
  Rank best = rank_of(best_g, best_pad);
  auto consider = [&](const std::vector<int64_t>& B) {
    uint64_t pad = 0;
    std::vector<Group> g = groups_of(B, pad);
    const Rank r = rank_of(g, pad);
    if (r < best) best = r, best_g = std::move(g), best_pad = pad;
  };
  {
    // The memory budget's sizes (a bucket loader's B = M_mem / S): the fewest fixed costs.
    consider(equal_tokens_batch_sizes(pr));
  }
  for (const std::vector<int64_t>& B : sizes) consider(B);
  for (int64_t tau : taus) {
    std::vector<int64_t> B(nb, 1);
    for (size_t b : live)
      B[b] = std::max<int64_t>(
          1, std::min<int64_t>(cap[b], tau >= fixed[b] + per[b] ? (tau - fixed[b]) / per[b] : 1));
    consider(B);
  }
  {
    // Too few slots for the step count: scale the sizes down until there are enough (at
    // worst one sample per micro-batch).
    std::vector<int64_t> B = cap;
    shrink_to_steps(target, target - best.shortfall, 64, [&](uint64_t) -> std::optional<uint64_t> {
      bool shrunk = false;
      for (size_t b : live)
        if (B[b] > 1) B[b] = std::max<int64_t>(1, B[b] * 3 / 4), shrunk = true;
      if (!shrunk) return std::nullopt;
      consider(B);
      return target - best.shortfall;
    });
  }

  // Expand the groups into micro-batches over each bucket's shuffled ids, in cost order.
  std::vector<uint64_t> next(from);
  out.least.assign(nb, kMaxTicks);
  for (const Group& x : best_g) {
    out.least[x.b] = std::min(out.least[x.b], x.cost);
    for (uint64_t k = 0; k < x.mult; ++k) {
      out.items.push_back({next[x.b], x.n, x.b, 0});
      next[x.b] += x.n;
    }
  }
  out.missing = best_pad;
  return out;
}

Plan plan_balanced_micro(const PlanProblem& pr) {
  const uint64_t w = uint64_t(pr.world_size);
  const BucketedPool pool = shuffled_by_bucket(pr);
  if (pool.ids.empty()) return empty_plan(pr, "balanced");
  if (pool.ids.size() > UINT32_MAX)
    throw ConfigError("balanced: more than 2^32 samples in one epoch");
  const uint64_t target = pr.target_steps();
  MicroCut cut = cut_for_slots(
      pr, pool, std::vector<uint64_t>(pool.begin.begin(), pool.begin.end() - 1), target, {});
  std::vector<SlotItem>& items = cut.items;
  std::vector<uint32_t> dropped;
  bool padded_last = false;
  if (items.size() % w != 0) {
    const uint64_t rem = items.size() % w;
    padded_last = pr.end_policy == EndPolicy::kPad;
    if (pr.end_policy == EndPolicy::kPad) {
      // Complete the last slot with repeats of a sample of the cheapest micro-batch's bucket.
      const SlotItem pad = padded_repeat(pool, cheapest_bucket(pool, cut.least));
      for (uint64_t r = rem; r < w; ++r) items.push_back(pad);
    } else {
      for (uint64_t i = items.size() - rem; i < items.size(); ++i)
        for (uint32_t k = 0; k < items[i].count; ++k)
          dropped.push_back(pool.ids[items[i].begin + k]);
      items.resize(items.size() - rem);
    }
  }
  const uint64_t slots = items.size() / w;
  // Ranks of each slot in a seeded order, so no rank always draws the longest.
  Rng rng = problem_rng(pr, kPurposeSlotRanks);
  for (uint64_t s = 0; s < slots; ++s) rng.shuffle(items.data() + s * w, w);
  const SlotSteps steps =
      steps_of_slots(pr, slot_keys(pr, items, w), target, kPurposeStepOrder, padded_last);
  Plan plan = plan_from_slots(pr, "balanced", pool.ids, items, steps);
  plan.dropped = std::move(dropped);
  return plan;
}

}  // namespace adaptiveload
