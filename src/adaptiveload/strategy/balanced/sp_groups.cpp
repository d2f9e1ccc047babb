// balanced with sequence-parallel groups of different sizes (docs/planner.md, "Sequence
// parallelism"): bucket b's samples run on groups of g_b ranks (PlanProblem::bucket_group),
// each group an aligned block of consecutive ranks, and every global step balances the
// groups' work.
//
// Micro-batches: each bucket is cut into micro-batches of about equal size, as large as the
// memory and the mode allow (below).
//
// step sync: the epoch is K * W rank-steps. The wide micro-batches (g > 1) go first, largest
// group first, then longest first, each to the aligned block of g ranks of some step whose
// room below its step's level fits it most tightly (best fit); the block's ranks then all
// stand at its clock plus the micro-batch's time. A step's level is the longest rank it
// already has, or more where the work left fills every step up to a common lambda; so the
// one-GPU work fills the steps that long groups made long, instead of levelling all
// rank-steps alike. Blocks of a larger g are placed before any smaller one, so every rank runs
// its groups from the largest g down and the ranks of a group reach its micro-batches together
// (nested aligned blocks: no two ranks wait on each other in opposite orders). Ties go to the
// next step before the next block, so long clips spread over the steps. Micro-batches are
// sized to at most a quarter of a rank-step's share of the work. The one-GPU samples are then
// dealt by balanced's own step-sync stage (deal_steps, strategy/balanced.h), the rank-steps
// starting at their wide work and ordered by their room below their step's level: the group
// of 1 is no special case, it is what balanced deals without groups.
//
// micro sync: every rank runs one micro-batch per slot. The wide micro-batches (g > 1),
// longest first, are packed into slots (first fit on aligned blocks); the free ranks of each
// slot get one-GPU micro-batches cut to the slot's longest, from the bucket with the most
// work left. The remaining one-GPU samples are cut by balanced's own micro-sync stage
// (cut_for_slots: a searched target cost, sorted and taken W at a time, so a slot holds
// micro-batches of about equal time). Slots are grouped into the global batch's steps as the
// other strategies do (steps_of_slots). A rank that would be left without work in a slot (or
// a step) gets a padded repeat, flagged and counted (the end-of-epoch policy is always pad
// here).
#include <algorithm>
#include <numeric>
#include <queue>
#include <set>
#include <unordered_map>

#include "adaptiveload/strategy/balanced/balanced.h"
#include "adaptiveload/strategy/balanced/group_cuts.h"
#include "adaptiveload/strategy/plan_writer.h"
#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/rng.h"

namespace adaptiveload {
namespace {

// `pool` gains the one-GPU samples' ids again, in the order they are written (appended).
// long-function: wide items placed by best fit, then the one-GPU ones dealt onto the same step
// levels (lambda): both stages update the same clocks
Plan plan_step(const BalancedProblem& pr, BucketedPool& pool, const GroupBuckets& c, uint64_t K,
               __int128 work) {
  const uint64_t W = uint64_t(pr.world_size);
  const Ticks share = Ticks(work / __int128(K * W));  // per rank-step
  // Wide micro-batches (placed here) and one-GPU ones (one candidate of the dealing below).
  std::vector<GroupItem> items, ones;
  for (size_t b = 0; b < c.g.size(); ++b)
    cut_bucket(c.g[b] > 1 ? items : ones, c, pr, b, pool.begin[b], pool.begin[b + 1],
               batch_for(c, b, share / 4));
  std::vector<uint32_t> order(items.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return items[a].group != items[b].group ? items[a].group > items[b].group
                                            : items[a].cost > items[b].cost;
  });
  std::stable_sort(ones.begin(), ones.end(),
                   [](const GroupItem& a, const GroupItem& b) { return a.cost > b.cost; });
  std::vector<int64_t> clock(K * W, 0);
  std::vector<uint64_t> where(items.size());  // t * W + first rank of its block
  // Rank-ticks of the wide items from position i on and of every one-GPU item (128-bit: a sum
  // over every rank of the epoch).
  std::vector<__int128> rest(order.size() + 1, 0);
  for (const GroupItem& it : ones) rest[order.size()] += it.cost;
  for (size_t i = order.size(); i-- > 0;)
    rest[i] = rest[i + 1] + __int128(items[order[i]].cost) * items[order[i]].group;
  std::vector<int64_t> level(K), top_of(K);
  // Each step's level before the items from position i on: its longest rank so far, or lambda
  // where the work left brings every step up to it: sum_t W max(M_t, lambda) = work left + the
  // clocks so far.
  auto set_levels = [&](size_t i) {
    __int128 have = rest[i];
    for (uint64_t t = 0; t < K; ++t) {
      int64_t m = 0;
      for (uint64_t r = 0; r < W; ++r) m = std::max(m, clock[t * W + r]), have += clock[t * W + r];
      top_of[t] = m;
    }
    std::vector<int64_t> sorted_top(top_of);
    std::sort(sorted_top.begin(), sorted_top.end());
    // lambda: with the j largest steps above it, (K - j) lambda + sum of those = have / W, in
    // whole ticks (the floor of the exact quotient; the test x >= lo exact as num >= lo * den).
    __int128 above = 0;
    int64_t lambda = 0;
    for (uint64_t j = 0; j < K; ++j) {
      const __int128 num = have - __int128(W) * above, den = __int128(W) * __int128(K - j);
      const int64_t lo = sorted_top[K - 1 - j];
      if (num >= __int128(lo) * den) {
        lambda = int64_t(num / den);  // num >= 0 here (lo >= 0): the division is the floor
        break;
      }
      above += lo;
    }
    for (uint64_t t = 0; t < K; ++t) level[t] = std::max<int64_t>(top_of[t], lambda);
  };
  for (size_t i = 0; i < order.size();) {
    const int g = items[order[i]].group;
    const uint64_t per_step = W / uint64_t(g);
    set_levels(i);
    // Wide micro-batches are coarse: best fit (the block whose room below its step's level
    // fits it most tightly; the roomiest when none does) leaves whole rooms for the next ones
    // instead of spreading every room thin.
    std::set<std::pair<int64_t, uint64_t>> rooms;  // (room, j * K + t)
    for (uint64_t t = 0; t < K; ++t)
      for (uint64_t j = 0; j < per_step; ++j)
        rooms.insert({level[t] - clock[t * W + j * uint64_t(g)], j * K + t});
    for (; i < order.size() && items[order[i]].group == g; ++i) {
      const Ticks cost = items[order[i]].cost;
      auto it = rooms.lower_bound({cost, 0});
      if (it == rooms.end()) it = std::prev(rooms.end());
      const auto [room, key] = *it;
      rooms.erase(it);
      const uint64_t t = key % K, first = (key / K) * uint64_t(g);
      where[order[i]] = t * W + first;
      for (uint64_t k = 0; k < uint64_t(g); ++k) clock[t * W + first + k] += cost;
      rooms.insert({room - cost, key});
    }
  }
  if (!ones.empty()) {
    // One-GPU micro-batches: balanced's own dealing (deal_steps), onto rank-steps that start at
    // their wide work and wait below their step's level (key: clock - level). The micro-batches
    // cut above, longest first, are one candidate (each whole to the rank-step with the most
    // room); balanced's dealings of the samples are the others; balanced's choice among them
    // (the global batch and the step mix held, the wide micro-batches counted in them).
    set_levels(order.size());
    std::vector<uint8_t> one_gpu(c.g.size());
    for (size_t b = 0; b < c.g.size(); ++b) one_gpu[b] = c.g[b] == 1;
    DealInputs in = deal_inputs(pr, pool, one_gpu);
    DealInputs::StartLoads start;
    start.load.resize(K * W), start.offset.resize(K * W);
    for (uint64_t t = 0; t < K; ++t)
      for (uint64_t r = 0; r < W; ++r)
        start.load[r * K + t] = clock[t * W + r], start.offset[r * K + t] = level[t];
    start.samples.assign(K * W, 0), start.images.assign(K * W, 0), start.tokens.assign(K * W, 0);
    for (const uint32_t n : order) {  // each wide micro-batch once, at its block's first rank
      const uint64_t j = (where[n] % W) * K + where[n] / W;
      start.samples[j] += items[n].count,
          start.tokens[j] += uint64_t(items[n].count) * uint64_t(in.tokens[items[n].bucket]);
      if (in.image[items[n].bucket]) start.images[j] += items[n].count;
    }
    in.start = &start;
    std::vector<DealInputs> extra(1, in);
    for (const GroupItem& it : ones) extra[0].pieces.push_back({it.cost, it.count, it.bucket});
    std::vector<GroupItem>().swap(ones);
    const StepDeal d = deal_steps(pr, in, K, to_ticks(pr.step_seconds()), std::move(extra));
    // Written as balanced writes its plan (replay_deal), rank-step by rank-step, into ids
    // appended to the pool's: each micro-batch then is one item over consecutive ids.
    Plan one;
    BinWriter w =
        lay_out_bins(one, d.counts, d.perm, false, 0);  // position x: rank x % W of step x / W
    replay_deal(d.counts, d.inputs, w);
    const uint64_t mbs = one.micro_batches.size();
    const uint64_t base = pool.ids.size();
    pool.ids.insert(pool.ids.end(), one.sample_ids.begin(), one.sample_ids.end());
    std::vector<uint32_t>().swap(one.sample_ids);
    items.reserve(items.size() + mbs), where.reserve(items.size() + mbs),
        order.reserve(items.size() + mbs);
    for (uint64_t x = 0; x < K * W; ++x)
      for (uint64_t m = one.rank_begin[x]; m < one.rank_begin[x + 1]; ++m) {
        const MicroBatch& mb = one.micro_batches[m];
        where.push_back(x);  // t * W + r
        order.push_back(uint32_t(items.size()));
        items.push_back(group_item(pr, base + mb.begin, mb.count, mb.bucket, 1));
      }
  }
  // Every rank works in every step: an empty rank-step takes half of the step's largest
  // one-GPU micro-batch, or else a padded repeat.
  std::vector<uint32_t> count(K * W, 0);
  for (uint32_t n : order)
    for (int k = 0; k < items[n].group; ++k) ++count[where[n] + uint64_t(k)];
  std::vector<std::vector<uint32_t>> ones_of_step;  // built only when some rank-step is empty
  std::priority_queue<std::pair<uint32_t, uint32_t>>
      largest;  // (count, item) of one-GPU items; lazily current
  for (uint64_t t = 0; t < K; ++t)
    for (uint64_t r = 0; r < W; ++r) {
      if (count[t * W + r]) continue;
      if (ones_of_step.empty()) {
        ones_of_step.resize(K);
        for (uint32_t n : order)
          if (items[n].group == 1)
            ones_of_step[where[n] / W].push_back(n), largest.push({items[n].count, n});
      }
      size_t best = SIZE_MAX;
      for (uint32_t n : ones_of_step[t])
        if (items[n].count > 1 && (best == SIZE_MAX || items[n].count > items[best].count))
          best = n;
      if (best == SIZE_MAX) {
        // None in this step: the largest one-GPU micro-batch of any step gives half.
        while (!largest.empty() && items[largest.top().second].count != largest.top().first)
          largest.pop();
        if (!largest.empty() && largest.top().first > 1) best = largest.top().second;
      }
      // Otherwise the smallest group any bucket has; its aligned block is empty too (blocks nest).
      const GroupItem moved =
          best != SIZE_MAX ? split_half(items[best], pr) : group_padding(pr, pool, c, int(W));
      const uint64_t first = r - r % moved.group;
      items.push_back(moved);
      where.push_back(t * W + first);
      order.push_back(uint32_t(items.size() - 1));
      for (uint64_t k = 0; k < moved.group; ++k) count[t * W + first + k] = 1;
      if (moved.count > 1 && !moved.padded) ones_of_step[t].push_back(uint32_t(items.size() - 1));
      if (best != SIZE_MAX) largest.push({items[best].count, uint32_t(best)});
      if (moved.group == 1 && !moved.padded)
        largest.push({moved.count, uint32_t(items.size() - 1)});
    }
  // A block's micro-batches of one bucket become one, as large as memory allows: the same
  // work with fewer fixed costs.
  {
    std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>>
        open;  // (block, bucket) -> head, tail
    const uint64_t nb = c.g.size();
    for (uint32_t n : order) {
      const uint64_t key = where[n] * nb + items[n].bucket;
      auto f = open.find(key);
      if (f != open.end()) {
        GroupItem& head = items[f->second.first];
        if (uint64_t(head.count) + items[n].count <= uint64_t(c.cap[head.bucket])) {
          items[f->second.second].next = n;
          f->second.second = n;
          items[n].merged = 1;
          head.count += items[n].count;
          head.cost = group_ticks(pr, MicroShape::uniform(head.count, (*pr.buckets)[head.bucket]),
                                  head.group);
          continue;
        }
      }
      open[key] = {n, n};
    }
    order.erase(std::remove_if(order.begin(), order.end(),
                               [&](uint32_t n) { return items[n].merged != 0; }),
                order.end());
  }
  // Lists in placement order (largest group first), steps shuffled.
  std::vector<uint32_t> perm(K);
  std::iota(perm.begin(), perm.end(), 0u);
  Rng rng = problem_rng(pr, kPurposeStepOrder);
  rng.shuffle(perm);
  std::vector<uint64_t> begin(K * W + 1, 0);
  for (uint32_t n : order) {
    const uint64_t t = perm[where[n] / W], first = where[n] % W;
    for (int k = 0; k < items[n].group; ++k) ++begin[t * W + first + uint64_t(k) + 1];
  }
  for (size_t x = 0; x < K * W; ++x) begin[x + 1] += begin[x];
  std::vector<uint64_t> fill(begin.begin(), begin.end() - 1);
  std::vector<uint32_t> lists(begin.back());
  // Largest group first, then as placed; the split-off and padded items (one-GPU) last.
  for (uint32_t n : order) {
    const uint64_t t = perm[where[n] / W], first = where[n] % W;
    for (int k = 0; k < items[n].group; ++k) lists[fill[t * W + first + uint64_t(k)]++] = n;
  }
  return write_group_plan(pr, pool, items, begin, lists, K);
}

// One micro-sync plan for target tau, the one-GPU fill of a wide slot cut to at most
// fill_cap (both ticks).
Plan micro_once(const PlanProblem& pr, const BucketedPool& pool, const GroupBuckets& c, uint64_t K,
                Ticks tau, Ticks fill_cap) {
  const uint64_t W = uint64_t(pr.world_size);
  const size_t nb = c.g.size();
  // Wide micro-batches, longest first, packed into slots on aligned free blocks.
  std::vector<GroupItem> items;
  std::vector<uint64_t> next(pool.begin.begin(), pool.begin.end() - 1);  // one-GPU samples left
  for (size_t b = 0; b < nb; ++b)
    if (c.g[b] > 1)
      cut_bucket(items, c, pr, b, pool.begin[b], pool.begin[b + 1], batch_for(c, b, tau)),
          next[b] = pool.begin[b + 1];
  std::stable_sort(items.begin(), items.end(),
                   [](const GroupItem& a, const GroupItem& b) { return a.cost > b.cost; });
  std::vector<std::vector<uint32_t>> slots;  // per slot, item index per rank (UINT32_MAX: free)
  std::vector<Ticks> slot_max;
  constexpr size_t kOpenSlots = 4;  // recent slots a wide micro-batch may still join
  for (uint32_t n = 0; n < items.size(); ++n) {
    const uint64_t g = items[n].group;
    bool placed = false;
    for (size_t s = slots.size() > kOpenSlots ? slots.size() - kOpenSlots : 0;
         s < slots.size() && !placed; ++s)
      for (uint64_t first = 0; first < W && !placed; first += g) {
        bool free = true;
        for (uint64_t k = 0; k < g && free; ++k) free = slots[s][first + k] == UINT32_MAX;
        if (!free) continue;
        for (uint64_t k = 0; k < g; ++k) slots[s][first + k] = n;
        placed = true;
      }
    if (!placed) {
      slots.emplace_back(W, UINT32_MAX);
      slot_max.push_back(items[n].cost);
      for (uint64_t k = 0; k < g; ++k) slots.back()[k] = n;
    }
  }
  // One-GPU work: the bucket with the most left, cut to `ticks`.
  std::vector<size_t> ones;
  for (size_t b = 0; b < nb; ++b)
    if (c.g[b] == 1) ones.push_back(b);
  auto take = [&](Ticks ticks) -> bool {
    size_t best = SIZE_MAX;
    __int128 best_work = 0;
    for (size_t b : ones) {
      const __int128 left = __int128(pool.begin[b + 1] - next[b]) * c.per[b];
      if (left > best_work) best_work = left, best = b;
    }
    if (best == SIZE_MAX) return false;
    const uint64_t n =
        std::min<uint64_t>(pool.begin[best + 1] - next[best], uint64_t(batch_for(c, best, ticks)));
    items.push_back(group_item(pr, next[best], uint32_t(n), uint16_t(best), 1));
    next[best] += n;
    return true;
  };
  for (size_t s = 0; s < slots.size(); ++s)
    for (uint64_t r = 0; r < W; ++r) {
      if (slots[s][r] != UINT32_MAX) continue;
      if (take(std::min(slot_max[s], fill_cap))) {
        slots[s][r] = uint32_t(items.size() - 1);
      } else {
        // No one-GPU sample left: a padded repeat on the largest free aligned block.
        uint64_t h = 1;
        while (r % (2 * h) == 0 && r + 2 * h <= W) {
          bool free = true;
          for (uint64_t k = 0; k < 2 * h && free; ++k) free = slots[s][r + k] == UINT32_MAX;
          if (!free) break;
          h *= 2;
        }
        items.push_back(group_padding(pr, pool, c, int(h)));
        const uint64_t g = items.back().group;
        for (uint64_t k = 0; k < g; ++k) slots[s][r + k] = uint32_t(items.size() - 1);
      }
    }
  // The rest of the one-GPU samples: balanced's own micro-sync cut (cut_for_slots; one more
  // candidate: every bucket cut for tau), for the slots the global batch's steps still need,
  // padded to a multiple of W; W to a slot, the ranks of each slot in a seeded order.
  const uint64_t made = slots.size();
  std::vector<int64_t> at_tau(nb, 1);  // one candidate: every bucket cut for tau
  for (size_t b : ones) at_tau[b] = batch_for(c, b, tau);
  const MicroCut rest = cut_for_slots(pr, pool, next, K > made ? K - made : 0, {at_tau});
  const size_t first_rest = items.size();
  for (const SlotItem& x : rest.items)
    items.push_back(group_item(pr, x.begin, x.count, x.bucket, 1));
  for (uint64_t k = 0; k < rest.missing; ++k)
    items.push_back(group_padding(pr, pool, c, 1));  // what no split made up
  Rng ranks = problem_rng(pr, kPurposeSlotRanks);
  for (size_t n = first_rest; n < items.size(); n += W) {
    slots.emplace_back(W);
    for (uint64_t r = 0; r < W; ++r) slots.back()[r] = uint32_t(n + r);
    ranks.shuffle(slots.back().data(), W);
  }
  // Slots into the global batch's steps.
  std::vector<uint64_t> key(slots.size(), 0);
  for (size_t s = 0; s < slots.size(); ++s)
    for (uint64_t r = 0; r < W; ++r) {
      const GroupItem& it = items[slots[s][r]];
      if (r % it.group == 0) key[s] += batch_weight(pr, it.bucket, it.count);  // once per group
    }
  const SlotSteps st =
      steps_of_slots(pr, key, std::min<uint64_t>(K, slots.size()), kPurposeStepOrder);
  const uint64_t steps = st.step_begin.size() - 1;
  std::vector<uint64_t> begin(steps * W + 1, 0);
  std::vector<uint32_t> lists;
  lists.reserve(slots.size() * W);
  for (uint64_t t = 0; t < steps; ++t)
    for (uint64_t r = 0; r < W; ++r) {
      for (uint64_t k = st.step_begin[t]; k < st.step_begin[t + 1]; ++k)
        lists.push_back(slots[st.order[k]][r]);
      begin[t * W + r + 1] = lists.size();
    }
  return write_group_plan(pr, pool, items, begin, lists, steps);
}

Plan plan_micro(const PlanProblem& pr, const BucketedPool& pool, const GroupBuckets& c, uint64_t K,
                __int128 work) {
  const uint64_t W = uint64_t(pr.world_size);
  // tau: the longest micro-batch any bucket's memory admits, at most a slot per step.
  Ticks tau = 0;
  for (size_t b = 0; b < c.g.size(); ++b)
    if (pool.begin[b + 1] > pool.begin[b])
      tau = std::max(tau, group_ticks(pr, MicroShape::uniform(c.cap[b], (*pr.buckets)[b]), c.g[b]));
  tau = Ticks(std::min<__int128>(tau, work / __int128(K * W)));
  // Fewer slots than the global batch's steps: smaller micro-batches, and the one-GPU fill
  // of wide slots held to tau, until the step count is kept (or nothing splits further).
  Ticks fill_cap = kMaxTicks;
  Plan p = micro_once(pr, pool, c, K, tau, fill_cap);
  shrink_to_steps(K, p.num_steps(), 8, [&](uint64_t have) -> std::optional<uint64_t> {
    fill_cap = tau;
    // tau times max(1/4, 0.9 have / K), exactly: tau max(36 have, 10 K) / (40 K).
    tau = Ticks(__int128(tau) * std::max<__int128>(__int128(36) * have, __int128(10) * K) /
                (__int128(40) * K));
    Plan q = micro_once(pr, pool, c, K, tau, fill_cap);
    if (q.num_steps() <= have) return std::nullopt;
    p = std::move(q);
    return p.num_steps();
  });
  return p;
}

}  // namespace

Plan plan_balanced_groups(const BalancedProblem& pr) {
  const uint64_t W = uint64_t(pr.world_size);
  BucketedPool pool = shuffled_by_bucket(pr);
  if (pool.ids.empty()) return empty_plan(pr, "balanced");
  if (pool.ids.size() > UINT32_MAX)
    throw ConfigError("balanced: more than 2^32 samples in one epoch");
  const GroupBuckets c = group_bucket_costs(pr);
  for (size_t b = 0; b < c.g.size(); ++b)
    if (pool.begin[b + 1] > pool.begin[b] && (W % uint64_t(c.g[b]) != 0))
      throw ConfigError("balanced: sequence-parallel group of " + std::to_string(c.g[b]) +
                        " for bucket " + (*pr.buckets)[b].name() +
                        " does not divide the world size " + std::to_string(W));
  // Rank-ticks of the epoch's work, each bucket at its largest micro-batch (its fixed cost
  // spread over the cap, rounded to the nearest tick per bucket).
  __int128 work = 0;
  for (size_t b = 0; b < c.g.size(); ++b) {
    const __int128 gn = __int128(c.g[b]) * __int128(pool.begin[b + 1] - pool.begin[b]);
    work += gn * c.per[b] + (gn * c.fixed[b] + c.cap[b] / 2) / c.cap[b];
  }
  uint64_t K = pr.target_steps();
  if (K == 0) {
    // The step budget's rank-steps: ceil(work / (W budget)); one step without a budget.
    const __int128 wb = __int128(W) * to_ticks(pr.step_budget_s);
    K = pr.step_budget_s > 0 ? uint64_t(std::max<__int128>(1, (work + wb - 1) / wb)) : 1;
  }
  // At most as many steps as give every rank a sample in each (a group's sample counts on
  // each of its g ranks); beyond that the steps would be padding.
  uint64_t rank_samples = 0;
  for (size_t b = 0; b < c.g.size(); ++b)
    rank_samples += (pool.begin[b + 1] - pool.begin[b]) * uint64_t(c.g[b]);
  K = std::max<uint64_t>(1, std::min<uint64_t>(K, rank_samples / W));
  return pr.layout.lockstep_slots() ? plan_micro(pr, pool, c, K, work)
                                    : plan_step(pr, pool, c, K, work);
}

}  // namespace adaptiveload
