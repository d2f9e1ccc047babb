// Packed micro-batches: the greedy packs and balanced with packing (packing.h; the greedy_pack
// strategy is greedy_pack.cpp).
//
// balanced, packed. Every rank-step holds P packs and every pack ("bin") is dealt to the same
// cost, so a step's ranks end together in step sync and a slot's ranks (one pack each) in
// micro sync: one dealing serves both layouts. The step count K is the global batch's (or,
// free, the fewest steps whose rank-steps stay within the step budget); P is the fewest packs
// a rank-step needs for its share of the tokens and of the memory, raised until every sample
// finds room. Samples go longest first (LPT) to the least-loaded bin that has room for them,
// a bin's load being its pack's cost in ticks: overhead + work * (1 + N_half / N). Long clips
// spread one to a bin and images fill the gaps. The bins are then sorted by tokens and cut
// into W * P strata of K bins; each step takes one bin of every stratum (in an order drawn
// from the seed), so every step holds a like mix and about the same tokens: the global batch
// is held in both sync modes.
#include "adaptiveload/strategy/packing.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <utility>

#include "adaptiveload/strategy/plan_writer.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {
namespace {

// Packs per rank-step tried past the fewest that hold the tokens and bytes: a bin a long clip
// cannot join after the others filled it needs a little slack.
constexpr int kExtraPacks = 16;
// The share of a pack's room the first try plans for.
constexpr double kFill = 0.97;
constexpr uint64_t kSearchSamples = 2'000'000;
// Past kSearchSamples samples, samples costing less than 1/kShortShare of a bin's level are
// dealt by the sweep (deal_packs).
constexpr double kShortShare = 64;
// Packs-per-rank-step candidates dealt for real (one past kSearchSamples samples).
constexpr int kPackCandidates = 4;
// The grouped layouts tried: steps whose heaviest bins are within this share of each other
// form one load class (wider classes: steps nearer the global batch, a little slower).
constexpr double kLoadClasses[] = {0.01, 0.03, 0.1};
constexpr double kStratified = -1, kSlotsByLoad = -2;  // the other layouts' tags

// A bin's cost in ticks from its work (ticks) and tokens: the cost model's pack formula, for a
// bin of one pack, or of as many packs as its tokens need (`bin_packs` > 1: a rank-step in step
// sync, cut into packs after dealing), each paying its overhead and its ramp.
struct PackCost {
  Ticks overhead = 0,
        sample = 0;  // sample: pack_sample_s (every bin's samples pay it, as in a pack)
  double half = 0;
  int64_t pack_tokens = 1;
  uint64_t bin_packs = 1;
  Ticks of(Ticks work, int64_t tokens, uint64_t n) const {
    if (tokens <= 0) return 0;
    const int64_t packs =
        bin_packs == 1 ? 1 : std::max<int64_t>(1, (tokens + pack_tokens - 1) / pack_tokens);
    return overhead * packs + work +
           Ticks(std::llround(double(work) * half * double(packs) / double(tokens))) +
           sample * Ticks(n);
  }
};

// Cuts ids[0, n) (one rank-step's samples) into packs that fit `room`, first fit by tokens,
// longest first; reorders the ids pack by pack and returns each pack's sample count.
std::vector<uint32_t> cut_into_packs(const PlanProblem& pr, const PackRoom& room, uint32_t* ids,
                                     uint64_t n, std::vector<uint32_t>& scratch) {
  auto S = [&](uint32_t id) { return pr.tokens((*pr.sample_bucket)[id]); };
  std::stable_sort(ids, ids + n, [&](uint32_t x, uint32_t y) { return S(x) > S(y); });
  std::vector<int64_t> used_tokens;
  std::vector<double> used_bytes;
  std::vector<uint32_t> count;
  scratch.resize(n);
  std::vector<uint32_t> pack_of(n);
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t t = S(ids[i]);
    size_t k = 0;
    while (k < count.size() && !room.fits(used_tokens[k], used_bytes[k], t)) ++k;
    if (k == count.size()) used_tokens.push_back(0), used_bytes.push_back(0), count.push_back(0);
    used_tokens[k] += t, used_bytes[k] += room.sample_bytes(t), ++count[k];
    pack_of[i] = uint32_t(k);
  }
  std::vector<uint64_t> at(count.size() + 1, 0);
  for (size_t k = 0; k < count.size(); ++k) at[k + 1] = at[k] + count[k];
  for (uint64_t i = 0; i < n; ++i) scratch[at[pack_of[i]]++] = ids[i];
  std::copy(scratch.begin(), scratch.begin() + int64_t(n), ids);
  return count;
}

// Deals the pool into `bins` bins (LPT with room); false when a sample found no bin with room.
// bin_of[i]: the bin of pool position i.
struct Deal {
  uint64_t steps = 0, packs = 0;  // K, and P bins a rank-step (its lockstep slots)
  uint64_t bin_packs = 1;         // packs a bin may need (step sync: a rank-step's)
  std::vector<uint32_t> bin_of;   // per pool position
  std::vector<int64_t> bin_tokens;
  std::vector<uint32_t> bin_count;
  std::vector<Ticks> bin_load;  // the pack's cost
  std::vector<uint32_t> at;     // at[(t * W + r) * P + s]: the bin of step t, rank r, slot s
  Ticks epoch = 0;
  double batch_dev = 0;  // largest |tokens of a step - mean| / mean
};

// long-function: LPT with room and the short-sample sweep deal into the same heap and bins, so one
// function keeps their shared state
bool deal_packs(const BucketedPool& pool, const std::vector<size_t>& order,
                const std::vector<Ticks>& per, const std::vector<int64_t>& tokens,
                const PackRoom& pack_room, const PackCost& pc, uint64_t bins, Deal& d) {
  PackRoom room = pack_room;  // a bin's: bin_packs packs' room
  room.max_tokens *= int64_t(pc.bin_packs), room.max_bytes *= double(pc.bin_packs);
  std::vector<uint32_t>& bin_of = d.bin_of;
  std::vector<int64_t>& bin_tokens = d.bin_tokens;
  std::vector<uint32_t>& bin_count = d.bin_count;
  bin_of.resize(pool.ids.size());
  std::vector<Ticks> work(bins, 0);
  std::vector<double> bytes(bins, 0.0);
  bin_tokens.assign(bins, 0);
  bin_count.assign(bins, 0);
  using Entry = std::pair<Ticks, uint32_t>;  // (load, bin): the least-loaded, then the lowest bin
  std::vector<Entry> heap(bins);
  for (uint64_t j = 0; j < bins; ++j) heap[j] = {0, uint32_t(j)};
  const auto later = std::greater<Entry>();
  std::make_heap(heap.begin(), heap.end(), later);
  std::vector<Entry> full;  // bins without room for the current bucket's sample, set aside
  // LPT with room: bucket b's samples from pool position `from` on, each (or a water-filling
  // run of them) to the least-loaded bin with room. False when one finds no room.
  auto heap_deal = [&](size_t b, uint64_t from) {
    // A bin without room for this bucket's sample has none for the rest of the bucket (it
    // only fills): set aside until the bucket is dealt, so each bin is passed over once.
    const int64_t S = tokens[b];
    full.clear();
    for (uint64_t i = from; i < pool.begin[b + 1]; ++i) {
      bool placed = false;
      while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const Entry e = heap.back();
        heap.pop_back();
        const uint32_t j = e.second;
        if (!room.fits(bin_tokens[j], bytes[j], S)) {
          full.push_back(e);
          continue;
        }
        // Water filling: as many of the bucket's samples as bring the bin level with the
        // next-least-loaded one (at least a share of the bucket's rest, so a bucket of many
        // short samples takes few heap operations), within the bin's room.
        const uint64_t left = pool.begin[b + 1] - i;
        uint64_t k = 1;
        if (left > 1) {
          const Ticks next = heap.empty() ? e.first : heap.front().first;
          const uint64_t level =
              next > e.first ? uint64_t((next - e.first) / std::max<Ticks>(1, per[b] + pc.sample))
                             : 0;
          k = std::max<uint64_t>({1, level, left / (4 * bins)});
          const uint64_t by_tokens = uint64_t((room.max_tokens - bin_tokens[j]) / S);
          const double per_bytes = room.sample_bytes(S);
          const uint64_t by_bytes =
              per_bytes > 0 ? uint64_t(std::max(0.0, (room.max_bytes - bytes[j]) / per_bytes))
                            : left;
          k = std::max<uint64_t>(1, std::min({k, left, by_tokens, by_bytes}));
        }
        work[j] += Ticks(k) * per[b], bin_tokens[j] += int64_t(k) * S;
        bytes[j] += double(k) * room.sample_bytes(S), bin_count[j] += uint32_t(k);
        for (uint64_t q = 0; q < k; ++q) bin_of[i + q] = j;
        i += k - 1;
        heap.push_back({pc.of(work[j], bin_tokens[j], bin_count[j]), j});
        std::push_heap(heap.begin(), heap.end(), later);
        placed = true;
        break;
      }
      if (!placed) return false;
    }
    for (const Entry& e : full) {
      heap.push_back(e);
      std::push_heap(heap.begin(), heap.end(), later);
    }
    return true;
  };
  // Short samples (a small share of a bin's level) are dealt in one sweep instead: the bins
  // from the least loaded up, each filled with the next short samples up to the level the
  // whole work gives every bin; what a bin's room or the level leaves goes through the heap.
  double total = 0;
  for (size_t b : order) total += double(pool.begin[b + 1] - pool.begin[b]) * double(per[b]);
  size_t short_from = order.size();
  if (pool.ids.size() > kSearchSamples)  // large pools only: the heap alone deals small ones
    while (short_from > 0 &&
           double(per[order[short_from - 1]]) * kShortShare < total / double(bins))
      --short_from;
  for (size_t k = 0; k < short_from; ++k)
    if (!heap_deal(order[k], pool.begin[order[k]])) return false;
  if (short_from == order.size()) {
    d.bin_load.resize(bins);
    for (uint64_t j = 0; j < bins; ++j) d.bin_load[j] = pc.of(work[j], bin_tokens[j], bin_count[j]);
    return true;
  }
  double level = 0;
  for (size_t k = short_from; k < order.size(); ++k)
    level +=
        double(pool.begin[order[k] + 1] - pool.begin[order[k]]) * double(per[order[k]] + pc.sample);
  std::vector<uint32_t> asc(bins);
  for (uint64_t j = 0; j < bins; ++j)
    asc[j] = uint32_t(j), level += double(pc.of(work[j], bin_tokens[j], bin_count[j]));
  const Ticks top = Ticks(level / double(bins));
  std::stable_sort(asc.begin(), asc.end(), [&](uint32_t x, uint32_t y) {
    return pc.of(work[x], bin_tokens[x], bin_count[x]) <
           pc.of(work[y], bin_tokens[y], bin_count[y]);
  });
  size_t k = short_from;
  uint64_t i = pool.begin[order[k]];
  for (uint32_t j : asc) {
    while (k < order.size()) {
      const size_t b = order[k];
      if (i == pool.begin[b + 1]) {
        if (++k < order.size()) i = pool.begin[order[k]];
        continue;
      }
      const int64_t S = tokens[b];
      if (!room.fits(bin_tokens[j], bytes[j], S) ||
          pc.of(work[j] + per[b], bin_tokens[j] + S, bin_count[j] + 1) > top)
        break;
      work[j] += per[b], bin_tokens[j] += S, bytes[j] += room.sample_bytes(S), ++bin_count[j];
      bin_of[i++] = j;
    }
    if (k == order.size()) break;
  }
  // The rest through the heap, from the loads the sweep left.
  heap.resize(bins);
  for (uint64_t j = 0; j < bins; ++j)
    heap[j] = {pc.of(work[j], bin_tokens[j], bin_count[j]), uint32_t(j)};
  std::make_heap(heap.begin(), heap.end(), later);
  for (; k < order.size(); ++k) {
    if (!heap_deal(order[k], i)) return false;
    if (k + 1 < order.size()) i = pool.begin[order[k + 1]];
  }
  d.bin_load.resize(bins);
  for (uint64_t j = 0; j < bins; ++j) d.bin_load[j] = pc.of(work[j], bin_tokens[j], bin_count[j]);
  return true;
}

void epoch_of(const PlanProblem& pr, Deal& d);

// Micro sync, P >= 2: slots of W bins of about one load (the bins by load, W consecutive ones
// a slot), so a slot's ranks wait little; the slots dealt to the steps by tokens in snake
// order, P a step, so every step holds a like mix of heavy and light slots and about the same
// tokens. A slot's time does not depend on its step, so the epoch is the grouped one.
void lay_out_slots(const PlanProblem& pr, Deal& d) {
  const uint64_t W = uint64_t(pr.world_size), K = d.steps, P = d.packs, slots = K * P;
  std::vector<uint32_t> sorted(K * W * P);
  for (uint64_t j = 0; j < sorted.size(); ++j) sorted[j] = uint32_t(j);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](uint32_t x, uint32_t y) { return d.bin_load[x] > d.bin_load[y]; });
  std::vector<std::pair<int64_t, uint64_t>> slot_tokens(slots);  // (tokens, slot)
  for (uint64_t j = 0; j < slots; ++j) {
    int64_t t = 0;
    for (uint64_t r = 0; r < W; ++r) t += d.bin_tokens[sorted[j * W + r]];
    slot_tokens[j] = {t, j};
  }
  std::stable_sort(slot_tokens.begin(), slot_tokens.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  Rng rng = problem_rng(pr, kPurposeStepOrder);
  std::vector<uint32_t> perm(K);
  for (uint64_t t = 0; t < K; ++t) perm[t] = uint32_t(t);
  rng.shuffle(perm);
  d.at.resize(K * W * P);
  for (uint64_t i = 0; i < slots; ++i) {
    const uint64_t round = i / K, pos = i % K, t = perm[round % 2 ? K - 1 - pos : pos];
    const uint64_t j = slot_tokens[i].second;
    for (uint64_t r = 0; r < W; ++r) d.at[(t * W + r) * P + round] = sorted[j * W + r];
  }
  epoch_of(pr, d);
}

// The bins laid out into steps, two ways. Stratified: the bins by tokens, cut into W * P
// strata of K bins; each step takes one of every stratum, in an order drawn from the seed
// (every step a like mix and about the same tokens). Grouped: the bins by load, W * P
// consecutive ones a step, the steps in an order drawn from the seed (heavy bins wait only on
// each other). Then the epoch's ticks in the layout's sync mode (per step its slowest rank, or
// the sum of its slots' slowest packs) and the largest deviation of a step's tokens from the
// mean.
void lay_out(const PlanProblem& pr, double load_class, Deal& d) {
  if (load_class == kSlotsByLoad) return lay_out_slots(pr, d);
  const bool grouped = load_class >= 0;
  const uint64_t W = uint64_t(pr.world_size), K = d.steps, P = d.packs, bins = K * W * P;
  std::vector<uint32_t> sorted(bins);
  for (uint64_t j = 0; j < bins; ++j) sorted[j] = uint32_t(j);
  if (grouped)
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](uint32_t x, uint32_t y) { return d.bin_load[x] > d.bin_load[y]; });
  else
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](uint32_t x, uint32_t y) { return d.bin_tokens[x] > d.bin_tokens[y]; });
  Rng rng = problem_rng(pr, kPurposeStepOrder);
  d.at.resize(bins);
  std::vector<uint32_t> perm(K);
  for (uint64_t t = 0; t < K; ++t) perm[t] = uint32_t(t);
  if (grouped) {
    // Steps of load classes (consecutive steps whose heaviest bin is within load_class of the
    // class's first): within a class the bins are dealt to its steps by tokens, snake order,
    // so each step of a class holds about the class's mean tokens at about the same maximum.
    const uint64_t per_step = W * P;
    std::vector<uint32_t> cls;
    for (uint64_t start = 0; start < K;) {
      uint64_t end = start + 1;
      const double top = double(d.bin_load[sorted[start * per_step]]);
      while (end < K && double(d.bin_load[sorted[end * per_step]]) >= (1 - load_class) * top) ++end;
      const uint64_t c = end - start;
      cls.assign(sorted.begin() + int64_t(start * per_step),
                 sorted.begin() + int64_t(end * per_step));
      std::stable_sort(cls.begin(), cls.end(),
                       [&](uint32_t x, uint32_t y) { return d.bin_tokens[x] > d.bin_tokens[y]; });
      for (uint64_t i = 0; i < cls.size(); ++i) {
        const uint64_t round = i / c, pos = i % c, t = start + (round % 2 ? c - 1 - pos : pos);
        sorted[t * per_step + round] = cls[i];
      }
      start = end;
    }
    rng.shuffle(perm);
    for (uint64_t t = 0; t < K; ++t)
      for (uint64_t q = 0; q < per_step; ++q)
        d.at[uint64_t(perm[t]) * per_step + (q % W) * P + q / W] = sorted[t * per_step + q];
  } else {
    for (uint64_t q = 0; q < W * P; ++q) {
      for (uint64_t t = 0; t < K; ++t) perm[t] = uint32_t(t);
      rng.shuffle(perm);
      const uint64_t r = q % W, s = q / W;
      for (uint64_t i = 0; i < K; ++i)
        d.at[(uint64_t(perm[i]) * W + r) * P + s] = sorted[q * K + i];
    }
  }
  epoch_of(pr, d);
}

// The epoch's ticks of the layout d.at in the problem's sync mode (per step its slowest rank,
// or the sum of its slots' slowest packs) and the largest deviation of a step's tokens from
// their mean.
void epoch_of(const PlanProblem& pr, Deal& d) {
  const uint64_t W = uint64_t(pr.world_size), K = d.steps, P = d.packs;
  const Ticks allreduce = pr.step_seconds() > 0 ? to_ticks(pr.step_seconds()) : 0;
  d.epoch = 0;
  std::vector<double> step_tokens(K, 0.0);
  double total = 0;
  for (uint64_t t = 0; t < K; ++t) {
    Ticks step = 0;
    for (uint64_t k = t * W * P; k < (t + 1) * W * P; ++k)
      step_tokens[t] += double(d.bin_tokens[d.at[k]]);
    total += step_tokens[t];
    if (pr.layout.lockstep_slots()) {
      for (uint64_t s = 0; s < P; ++s) {
        Ticks slot = 0;
        for (uint64_t r = 0; r < W; ++r)
          slot = std::max(slot, d.bin_load[d.at[(t * W + r) * P + s]]);
        step += slot;
      }
    } else {
      for (uint64_t r = 0; r < W; ++r) {
        Ticks rank = 0;
        for (uint64_t s = 0; s < P; ++s) rank += d.bin_load[d.at[(t * W + r) * P + s]];
        step = std::max(step, rank);
      }
    }
    step += allreduce;  // the all-reduce (step sync) and the optimizer step, once a step
    d.epoch += step;
  }
  d.batch_dev = 0;
  const double mean = total / double(K);
  if (mean > 0)
    for (double x : step_tokens) d.batch_dev = std::max(d.batch_dev, std::abs(x - mean) / mean);
}

}  // namespace

std::vector<Ticks> per_sample_ticks(const PlanProblem& pr) {
  std::vector<Ticks> per(pr.buckets->size());
  for (size_t b = 0; b < per.size(); ++b) per[b] = sample_ticks(pr, (*pr.buckets)[b]).per;
  return per;
}

PackRoom PackRoom::of(const PlanProblem& pr) {
  PackRoom r;
  r.max_tokens = pr.mem_budget_tokens;
  r.max_bytes = pr.usable_bytes - pr.memory.static_bytes;
  r.m0 = pr.memory.m0, r.m1 = pr.memory.m1;
  if (r.max_tokens <= 0 || !(r.max_bytes > 0))
    throw ConfigError(
        "packing needs a memory budget: the problem has no token budget or no device memory beyond "
        "the model state");
  return r;
}

uint16_t pack_bucket(const PlanProblem& pr, const uint32_t* ids, uint64_t n) {
  if (n == 0) return 0;
  const uint16_t b = (*pr.sample_bucket)[ids[0]];
  for (uint64_t k = 1; k < n; ++k)
    if ((*pr.sample_bucket)[ids[k]] != b) return kPackedBucket;
  return b;
}

Packs greedy_packs(const PlanProblem& pr, const PackRoom& room, int64_t target_tokens) {
  Packs p;
  p.ids = pr.pool_ids();
  Rng rng = problem_rng(pr, kPurposeGreedyPack);
  rng.shuffle(p.ids);
  const int64_t target =
      target_tokens > 0 ? std::min(target_tokens, room.max_tokens) : room.max_tokens;
  int64_t used_tokens = 0;
  double used_bytes = 0;
  for (uint64_t i = 0; i < p.ids.size(); ++i) {
    const int64_t S = pr.tokens((*pr.sample_bucket)[p.ids[i]]);
    if (!room.fits(0, 0, S))
      throw ConfigError("a sample of " + std::to_string(S) + " tokens does not fit one pack (" +
                        std::to_string(room.max_tokens) +
                        " tokens); lower the resolution or raise " +
                        option_word("mem_budget_tokens"));
    if (used_tokens > 0 && (used_tokens + S > target || !room.fits(used_tokens, used_bytes, S))) {
      p.begin.push_back(i);
      used_tokens = 0, used_bytes = 0;
    }
    used_tokens += S, used_bytes += room.sample_bytes(S);
  }
  if (!p.ids.empty()) p.begin.push_back(p.ids.size());
  return p;
}

// long-function: the candidate search over packs per rank-step, the held-batch choice and the
// writing of the chosen deal share the deals in place (no copies past kSearchSamples samples)
Plan plan_balanced_packed(const BalancedProblem& pr) {
  const uint64_t W = uint64_t(pr.world_size);
  Plan plan = empty_plan(pr, "balanced");
  plan.packed = true;
  const BucketedPool pool = shuffled_by_bucket(pr);
  const uint64_t n = pool.ids.size();
  if (n == 0) return plan;
  if (n > UINT32_MAX) throw ConfigError("balanced: more than 2^32 samples in one epoch");
  const size_t nb = pr.buckets->size();
  const PackRoom room = PackRoom::of(pr);
  const std::vector<Ticks> per = per_sample_ticks(pr);
  std::vector<int64_t> tokens(nb);
  std::vector<size_t> order;
  double total_tokens = 0, total_bytes = 0, total_work = 0;
  for (size_t b = 0; b < nb; ++b) {
    tokens[b] = pr.tokens(uint16_t(b));
    const uint64_t c = pool.begin[b + 1] - pool.begin[b];
    if (c == 0) continue;
    if (!room.fits(0, 0, tokens[b]))
      throw ConfigError("a sample of bucket " + (*pr.buckets)[b].name() + " (" +
                        std::to_string(tokens[b]) + " tokens) does not fit one pack (" +
                        std::to_string(room.max_tokens) + " tokens); raise " +
                        option_word("mem_budget_tokens") + " or leave it on auto");
    order.push_back(b);
    total_tokens += double(c) * double(tokens[b]);
    total_bytes += double(c) * room.sample_bytes(tokens[b]);
    total_work += double(c) * double(per[b]);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return per[x] > per[y]; });
  PackCost pc;
  pc.overhead = pr.cost->overhead_s > 0 ? to_ticks(pr.cost->overhead_s) : 0;
  pc.sample = pr.cost->pack_sample_s > 0 ? to_ticks(pr.cost->pack_sample_s) : 0;
  pc.half = pr.cost->half_efficiency_tokens;
  pc.pack_tokens = room.max_tokens;

  const uint64_t k_max = std::max<uint64_t>(1, n / W);
  uint64_t K = pr.target_steps();
  if (K == 0) {  // free: the fewest steps within the step budget
    const double cap = double(to_ticks(pr.step_budget_s));
    K = uint64_t(std::max(1.0, std::ceil(total_work / (double(W) * cap))));
  }
  K = std::clamp<uint64_t>(K, 1, k_max);
  const uint64_t p0 = uint64_t(
      std::max({1.0, std::ceil(total_tokens / (double(K * W) * kFill * double(room.max_tokens))),
                std::ceil(total_bytes / (double(K * W) * kFill * room.max_bytes))}));
  // Candidates: the fewest packs a rank-step that hold its share, and more (room to balance a
  // rank-step whose long clips fill a pack's tokens before its cost is level; each pack more
  // costs an overhead); the fastest layout is kept.
  // Each layout's pick refers to its deal (one past kSearchSamples samples: no copies).
  struct Pick {
    std::shared_ptr<Deal> deal;
    std::vector<uint32_t> at;
    Ticks epoch = 0;
  };
  Pick held, fastest;
  int tried = 0;
  const bool hold_batch = (pr.hold & kHoldBatch) && pr.batch_kind != BatchKind::kFree;
  const int candidates = n <= kSearchSamples ? kPackCandidates : 1;
  // Step sync: a bin is a rank-step, of up to p packs (cut after dealing); micro sync: a bin
  // is a pack, p of them a rank-step (its lockstep slots).
  const bool slots = pr.layout.lockstep_slots();
  for (uint64_t p = p0; p < p0 + kExtraPacks && tried < candidates; ++p) {
    auto d = std::make_shared<Deal>();
    const uint64_t per_rank = slots ? p : 1;
    // Every bin gets a sample where there are enough: fewer steps when bins outnumber samples.
    d->steps = std::max<uint64_t>(1, std::min(K, n / (W * per_rank)));
    d->packs = per_rank;
    d->bin_packs = slots ? 1 : p;
    pc.bin_packs = d->bin_packs;
    if (d->steps * W * per_rank > UINT32_MAX)
      throw ConfigError("balanced: more than 2^32 packs in one epoch");
    if (!deal_packs(pool, order, per, tokens, room, pc, d->steps * W * per_rank, *d)) continue;
    ++tried;
    for (const double load_class :
         {kStratified, kLoadClasses[0], kLoadClasses[1], kLoadClasses[2], kSlotsByLoad}) {
      if (load_class == kSlotsByLoad && (!slots || d->packs < 2)) continue;
      lay_out(pr, load_class, *d);
      auto keep = [&](Pick& k) {
        if (k.deal && k.epoch <= d->epoch) return;
        k.deal = d, k.at = d->at, k.epoch = d->epoch;
      };
      keep(fastest);
      // A layout that holds the global batch: tokens per step within kMaxBatchDev.
      if (!hold_batch || d->batch_dev <= kMaxBatchDev) keep(held);
    }
  }
  if (!fastest.deal) throw std::logic_error("balanced: packing found no room for a sample");
  // The batch is held where that costs at most kHoldCost of the epoch; else the fastest.
  const Pick& pick =
      held.deal && double(held.epoch) <= (1 + kHoldCost) * double(fastest.epoch) ? held : fastest;
  Deal& best = *pick.deal;
  std::vector<uint32_t>& bin_of = best.bin_of;
  const std::vector<uint32_t>& bin_count = best.bin_count;
  const std::vector<uint32_t>& at = pick.at;
  const uint64_t P = best.packs, steps = best.steps, bins = steps * W * P;

  // Write: each bin's samples at its place (pool order within a bin), pads after them.
  std::vector<uint64_t> pos(bins);
  uint64_t next = 0;
  for (uint64_t k = 0; k < bins; ++k) pos[at[k]] = next, next += bin_count[at[k]];
  plan.sample_ids.resize(n);
  for (uint64_t i = 0; i < n; ++i) plan.sample_ids[pos[bin_of[i]]++] = pool.ids[i];
  std::vector<uint32_t>().swap(bin_of);
  plan.micro_batches.reserve(bins);
  plan.rank_begin.reserve(steps * W + 1);
  next = 0;
  size_t cheapest = SIZE_MAX;
  std::vector<uint32_t> scratch;
  for (uint64_t k = 0; k < bins; ++k) {
    const uint32_t j = at[k];
    MicroBatch mb;
    if (bin_count[j] > 0 && best.bin_packs > 1) {
      // A rank-step of step sync: its samples cut into packs, each a micro-batch.
      const std::vector<uint32_t> packs =
          cut_into_packs(pr, room, plan.sample_ids.data() + next, bin_count[j], scratch);
      for (uint32_t c : packs) {
        mb.begin = uint32_t(next), mb.count = c;
        mb.bucket = pack_bucket(pr, plan.sample_ids.data() + next, c);
        next += c;
        plan.micro_batches.push_back(mb);
      }
      if ((k + 1) % P == 0) plan.rank_begin.push_back(plan.micro_batches.size());
      continue;
    }
    if (bin_count[j] > 0) {
      mb.begin = uint32_t(next), mb.count = bin_count[j];
      mb.bucket = pack_bucket(pr, plan.sample_ids.data() + next, bin_count[j]);
      next += bin_count[j];
    } else {  // fewer samples than bins: a repeat of the epoch's cheapest sample, flagged
      if (cheapest == SIZE_MAX) cheapest = cheapest_bucket(pool, per);
      const SlotItem pad = padded_repeat(pool, cheapest);
      mb.begin = uint32_t(plan.sample_ids.size()), mb.count = pad.count, mb.bucket = pad.bucket,
      mb.padded = pad.padded;
      plan.sample_ids.push_back(pool.ids[pad.begin]);
    }
    plan.micro_batches.push_back(mb);
    if ((k + 1) % P == 0) plan.rank_begin.push_back(plan.micro_batches.size());
  }
  total_steps(pr, plan);
  // Fewer samples than ranks: the only step cannot give every rank work; dropped under
  // --end-policy drop.
  return drop_padded_only_step(pr, std::move(plan), "balanced");
}

}  // namespace adaptiveload
