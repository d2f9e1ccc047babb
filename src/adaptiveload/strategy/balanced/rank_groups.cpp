// rank_dealing::Dealer::group_step and group_slot (rank_dealer.h): plans with sequence-parallel
// groups dealt again to ranks of unequal speed.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/strategy/balanced/rank_dealer.h"

namespace adaptiveload {
namespace rank_dealing {

namespace {

// A wide micro-batch of a step or slot: the plan's micro-batch on its block's first rank.
struct Wide {
  Mb mb;
  size_t first = 0;  // its block as planned
};

// Whether the wide micro-batch fits the memory of every rank of the block from `first`.
bool fits_block(const Mb& mb, size_t first, const MemoryModel& memory,
                const std::vector<double>& usable) {
  const double bytes = memory.bytes(mb.shape, int(mb.group));
  for (size_t k = first; k < first + mb.group; ++k)
    if (bytes > usable[k]) return false;
  return true;
}

}  // namespace

std::vector<std::vector<Mb>> Dealer::group_step(size_t t) const {
  const size_t W = size_t(plan_.world_size);
  std::vector<std::vector<Mb>> out(W);
  std::vector<double> clock(W, 0.0);  // seconds
  std::vector<Wide> wide;
  std::vector<Sample> samples;
  std::vector<std::pair<size_t, Mb>> repeats;  // one-GPU padded repeats, on their rank
  for (size_t r = 0; r < W; ++r) {
    const auto [b, e] = plan_.rank_range(t, int(r));
    for (uint64_t m = b; m < e; ++m) {
      const MicroBatch& mb = plan_.micro_batches[m];
      const int g = plan_.group(m);
      if (g > 1) {
        // Its block's first rank lists it for the block.
        if (r % size_t(g) == 0) wide.push_back({group_copy(t, r, m), r});
      } else if (mb.padded) {
        repeats.emplace_back(r, copy_of(m));
      } else {
        for (uint32_t k = 0; k < mb.count; ++k) samples.push_back(sample(plan_.ids(mb)[k]));
      }
    }
  }
  // The wide micro-batches: largest group first (a rank runs its groups from the largest down,
  // as planned), longest first; a padded wide repeat keeps its block.
  std::stable_sort(wide.begin(), wide.end(), [](const Wide& a, const Wide& b) {
    return a.mb.group != b.mb.group ? a.mb.group > b.mb.group : a.mb.cost > b.mb.cost;
  });
  for (const Wide& w : wide) {
    const size_t g = w.mb.group;
    auto end_on = [&](size_t first) {
      double start = 0;
      for (size_t k = first; k < first + g; ++k) start = std::max(start, clock[k]);
      return start + w.mb.cost / pr_.layout.group_speed(first, int(g));
    };
    // Its planned block unless another (within its ranks' memory) ends it sooner; a padded
    // repeat, or one that fits no block, stays where it was planned.
    size_t best = SIZE_MAX;
    double end = 0;
    if (fits_block(w.mb, w.first, pr_.memory, caps_.usable)) best = w.first, end = end_on(w.first);
    for (size_t first = 0; first < W && !w.mb.padded; first += g)
      if (first != w.first && fits_block(w.mb, first, pr_.memory, caps_.usable)) {
        const double e = end_on(first);
        if (best == SIZE_MAX || e < end) best = first, end = e;
      }
    if (best == SIZE_MAX) best = w.first, end = end_on(w.first);
    for (size_t k = best; k < best + g; ++k) clock[k] = end, out[k].push_back(w.mb);
  }
  for (auto& [r, mb] : repeats) {
    clock[r] += mb.cost / pr_.layout.speed(r);
    out[r].push_back(std::move(mb));
  }
  // The one-GPU samples, longest first, each where it ends soonest after its rank's wide work
  // (step's dealing, from each rank's clock as its load).
  std::vector<double> load(W);
  for (size_t r = 0; r < W; ++r) load[r] = clock[r] * pr_.layout.speed(r);
  deal_soonest(samples, out, load);
  // Every rank works in every step (as balanced plans groups): where the wide micro-batches
  // left a block without work and no one-GPU sample reached it, the step as planned.
  for (size_t r = 0; r < W; ++r)
    if (out[r].empty()) return planned_step(t);
  return out;
}

std::vector<std::vector<Mb>> Dealer::planned_step(size_t t) const {
  const size_t W = size_t(plan_.world_size);
  std::vector<std::vector<Mb>> out(W);
  for (size_t r = 0; r < W; ++r) {
    const auto [b, e] = plan_.rank_range(t, int(r));
    for (uint64_t m = b; m < e; ++m) out[r].push_back(group_copy(t, r, m));
  }
  return out;
}

Mb Dealer::group_copy(size_t t, size_t r, uint64_t m) const {
  Mb mb = copy_of(m);
  const int g = plan_.group(m);
  mb.group = uint8_t(g);
  if (g > 1) {
    const uint64_t first = plan_.rank_range(t, int(r - r % size_t(g))).first;
    mb.shared = first + (m - plan_.rank_range(t, int(r)).first);
    mb.cost = group_cost(*pr_.cost, mb.shape, g, pr_.layout.sp);
  }
  return mb;
}

std::vector<Mb> Dealer::group_slot(size_t t, uint64_t i) const {
  const size_t W = size_t(plan_.world_size);
  std::vector<Mb> in(W);
  bool padded = false;
  int g_one = 0;  // the slot's wide group size: 0 where it has none, -1 where several
  std::vector<Wide> wide;
  std::vector<char> busy(W, 0);
  for (size_t r = 0; r < W; ++r) {
    const uint64_t m = plan_.rank_range(t, int(r)).first + i;
    in[r] = group_copy(t, r, m);
    padded |= in[r].padded != 0;
    const int g = in[r].group;
    if (g > 1) {
      busy[r] = 1;
      if (r % size_t(g) == 0) {
        wide.push_back({in[r], r});
        g_one = g_one == 0 || g_one == g ? g : -1;
      }
    }
  }
  if (padded) return in;  // a padded repeat keeps its slot as planned
  std::vector<Mb> out(W);
  if (g_one > 0) {
    // The longest wide micro-batch to the fastest block that holds it.
    const size_t g = size_t(g_one);
    std::vector<size_t> blocks;
    for (size_t first = 0; first < W; first += g) blocks.push_back(first);
    std::stable_sort(blocks.begin(), blocks.end(), [&](size_t a, size_t b) {
      return pr_.layout.group_speed(a, int(g)) > pr_.layout.group_speed(b, int(g));
    });
    std::stable_sort(wide.begin(), wide.end(),
                     [](const Wide& a, const Wide& b) { return a.mb.cost > b.mb.cost; });
    std::vector<char> taken(W, 0);
    std::vector<size_t> where(wide.size(), SIZE_MAX);
    for (size_t k = 0; k < wide.size(); ++k)
      for (size_t first : blocks)
        if (!taken[first] && fits_block(wide[k].mb, first, pr_.memory, caps_.usable)) {
          where[k] = first, taken[first] = 1;
          break;
        }
    if (std::find(where.begin(), where.end(), SIZE_MAX) == where.end()) {
      std::fill(busy.begin(), busy.end(), 0);
      for (size_t k = 0; k < wide.size(); ++k)
        for (size_t r = where[k]; r < where[k] + g; ++r) {
          out[r] = in[wide[k].first];
          busy[r] = 1;
        }
    } else {
      for (size_t r = 0; r < W; ++r)
        if (busy[r]) out[r] = in[r];
    }
  } else {
    for (size_t r = 0; r < W; ++r)
      if (busy[r]) out[r] = in[r];
  }
  // The one-GPU micro-batches shared among the ranks the wide ones leave.
  std::vector<Mb> one(W);
  std::vector<size_t> planned, free;
  for (size_t r = 0; r < W; ++r) {
    if (in[r].group == 1) one[r] = in[r], planned.push_back(r);
    if (!busy[r]) free.push_back(r);
  }
  if (free.size() != planned.size()) return in;
  // share_slot reads each rank's micro-batch: the planned ones moved onto the free ranks.
  std::vector<Mb> moved(W);
  for (size_t k = 0; k < free.size(); ++k) moved[free[k]] = one[planned[k]];
  std::vector<Mb> shared(W);
  if (!share_slot(moved, free, shared)) return in;
  for (size_t r : free) out[r] = std::move(shared[r]);
  return out;
}

}  // namespace rank_dealing
}  // namespace adaptiveload
