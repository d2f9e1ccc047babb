// balanced (ours): every global step gives each rank about the same amount of work.
//
// The epoch is planned as a whole, as K * W "bins" (one per rank and step). The step count K
// is chosen, from K_lo = ceil(R / (W * C)) (total work R, per-rank step budget C) upwards,
// to minimise the epoch time K * (LB(K * W) + all-reduce), where LB(m) = max(t_1, R / m,
// t_m + t_(m+1)) is the classic lower bound of scheduling sorted items t_1 >= t_2 >= ... on m
// machines; the best few candidates are then dealt for real and the fastest kept. Fewer
// steps than that would force two long clips into some bins. Samples are dealt longest
// first (LPT) to the least-loaded
// bin; once samples are short, a bin takes as many of one bucket as bring it level with the
// next-least-loaded bin (water filling), at least enough to pay for a new micro-batch's
// overhead. Long clips thus spread one per bin and short clips and images fill the gaps, so
// every bin ends within about one short sample of the others. A bin's samples of one bucket
// form one micro-batch (several when the dual constraint caps its size); a rank with several
// micro-batches in a step runs them with gradient accumulation. Bins are shuffled into
// steps, so each step mixes buckets and the step order changes with the seed and epoch.
//
// Times are integer nanosecond "ticks" rounded once from the cost model, so every decision is
// integer arithmetic and identical on every rank.
#include <algorithm>
#include <cmath>
#include <queue>

#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/rng.h"

namespace adaptiveload {
namespace {

int64_t to_ticks(double seconds) { return std::max<int64_t>(1, std::llround(seconds * 1e9)); }

struct Piece {  // `count` consecutive ids of one bucket's shuffled list, given to one bin
  uint32_t bin;
  uint16_t bucket;
  uint8_t new_mb;  // starts a new micro-batch in its bin
  uint64_t begin;
  uint32_t count;
};

struct Dealt {
  std::vector<Piece> pieces;
  std::vector<uint32_t> perm;  // bin of (step t, rank r) at t * W + r
  int64_t epoch_ticks = 0;
};

constexpr size_t kBalancedCandidates = 3;

// Deals the samples to `bins` bins (LPT + water filling), shuffles the bins into steps and
// measures the epoch in ticks: sum over steps of the slowest bin, plus the all-reduces.
Dealt deal(uint64_t bins, int W, const std::vector<size_t>& order, const BucketedPool& pool,
           const std::vector<int64_t>& per, const std::vector<int64_t>& fixed, const std::vector<int64_t>& mem_cap,
           Rng& rng, int64_t allreduce) {
  Dealt out;
  std::vector<Piece>& pieces = out.pieces;
  // Min-heap of (load, bin); ties go to the lowest bin index.
  using Entry = std::pair<int64_t, uint32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  {
    std::vector<Entry> init(bins);
    for (uint64_t j = 0; j < bins; ++j) init[j] = {0, uint32_t(j)};
    heap = std::priority_queue<Entry, std::vector<Entry>, std::greater<>>(std::greater<>(), std::move(init));
  }
  std::vector<int64_t> loads(bins, 0);
  std::vector<uint16_t> last_bucket(bins, kNoBucket);  // bucket of each bin's latest micro-batch
  std::vector<uint32_t> last_count(bins, 0);
  for (size_t b : order) {
    uint64_t next = pool.begin[b];
    const uint64_t end = pool.begin[b + 1];
    // A new micro-batch takes at least enough samples to cover its own overhead.
    const int64_t min_new = std::max<int64_t>(1, (fixed[b] + per[b] - 1) / per[b]);
    while (next < end) {
      auto [load, j] = heap.top();
      heap.pop();
      const int64_t level = heap.empty() ? load : heap.top().first;
      const bool merge = last_bucket[j] == b && last_count[j] < uint64_t(mem_cap[b]);
      const int64_t gap = level - load - (merge ? 0 : fixed[b]);
      int64_t n = std::max<int64_t>(merge ? 1 : min_new, gap > 0 ? (gap + per[b] - 1) / per[b] : 1);
      n = std::min<int64_t>({n, int64_t(end - next), merge ? mem_cap[b] - int64_t(last_count[j]) : mem_cap[b]});
      pieces.push_back({j, uint16_t(b), uint8_t(merge ? 0 : 1), next, uint32_t(n)});
      next += uint64_t(n);
      if (merge) {
        last_count[j] += uint32_t(n);
      } else {
        last_bucket[j] = uint16_t(b), last_count[j] = uint32_t(n);
      }
      loads[j] = load + n * per[b] + (merge ? 0 : fixed[b]);
      heap.push({loads[j], j});
    }
  }

  out.perm.resize(bins);
  for (uint64_t j = 0; j < bins; ++j) out.perm[j] = uint32_t(j);
  rng.shuffle(out.perm);
  for (uint64_t t = 0; t < bins / uint64_t(W); ++t) {
    int64_t mx = 0;
    for (int r = 0; r < W; ++r) mx = std::max(mx, loads[out.perm[t * uint64_t(W) + uint64_t(r)]]);
    out.epoch_ticks += mx + allreduce;
  }
  return out;
}

}  // namespace

Plan plan_balanced(const PlanProblem& pr) {
  const int W = pr.world_size;
  const size_t nb = pr.buckets->size();
  Plan plan;
  plan.strategy = "balanced";
  plan.world_size = W;
  BucketedPool pool = shuffled_by_bucket(pr);
  const uint64_t n_samples = pool.ids.size();
  if (n_samples == 0) return plan;

  // Micro-batches obey the dual constraint (memory and compute); a rank may run several.
  const std::vector<int64_t> mem_cap = dual_batch_sizes(pr);
  std::vector<int64_t> per(nb), fixed(nb), tokens(nb);
  for (size_t b = 0; b < nb; ++b) {
    const Bucket& bk = (*pr.buckets)[b];
    tokens[b] = bk.tokens;
    per[b] = to_ticks(pr.cost->marginal_time(1, bk));
    fixed[b] = std::max<int64_t>(0, to_ticks(pr.cost->microbatch_time(1, bk)) - per[b]);
  }
  const int64_t cap = to_ticks(pr.step_budget_s);
  uint64_t work = 0;  // ticks, without per-micro-batch overheads
  for (size_t b = 0; b < nb; ++b) {
    const uint64_t n = pool.begin[b + 1] - pool.begin[b];
    if (n > 0 && fixed[b] + per[b] > cap)
      throw ConfigError("step budget " + std::to_string(pr.step_budget_s) + " s is below the time of one sample of bucket " +
                        (*pr.buckets)[b].name() + " (" + std::to_string(double(fixed[b] + per[b]) * 1e-9) +
                        " s); raise --step-budget or leave it on auto");
    work += n * uint64_t(per[b]);
  }
  std::vector<size_t> order;
  for (size_t b = 0; b < nb; ++b)
    if (pool.begin[b + 1] > pool.begin[b]) order.push_back(b);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return per[x] > per[y]; });

  // Candidate step counts, by the lower bound of their epoch time.
  const uint64_t wc = uint64_t(W) * uint64_t(cap);
  const uint64_t k_lo = std::max<uint64_t>(1, (work + wc - 1) / wc);
  const uint64_t k_hi = n_samples >= uint64_t(W) ? std::max<uint64_t>(1, n_samples / uint64_t(W)) : 1;
  const int64_t allreduce = to_ticks(pr.allreduce_s);
  auto item = [&](uint64_t m) -> int64_t {  // m-th longest sample's ticks, 1-based; 0 past the end
    for (size_t b : order) {
      const uint64_t n = pool.begin[b + 1] - pool.begin[b];
      if (m <= n) return per[b];
      m -= n;
    }
    return 0;
  };
  std::vector<std::pair<double, uint64_t>> candidates;
  for (uint64_t k = std::min(k_lo, k_hi); k <= k_hi; ++k) {
    const uint64_t m = k * uint64_t(W);
    const double lb = std::max({double(item(1)), double(work) / double(m), double(item(m) + item(m + 1))});
    candidates.push_back({double(k) * (lb + double(allreduce)), k});
    if (double(k) * double(allreduce) > candidates.front().first * 2) break;  // only more all-reduces from here
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.resize(std::min<size_t>(candidates.size(), kBalancedCandidates));

  Rng rng = Rng::for_purpose(pr.seed, uint64_t(pr.epoch), kPurposeBalancedDraw | (pr.segment << 8));
  const Rng rng_start = rng;
  Dealt best;
  for (const auto& cand : candidates) {
    rng = rng_start;
    Dealt d = deal(cand.second * uint64_t(W), W, order, pool, per, fixed, mem_cap, rng, allreduce);
    if (best.pieces.empty() || d.epoch_ticks < best.epoch_ticks) best = std::move(d);
  }
  const uint64_t bins = best.perm.size();
  const uint64_t steps = bins / uint64_t(W);
  std::vector<Piece>& pieces = best.pieces;
  std::vector<uint32_t>& perm = best.perm;

  // Group pieces by bin (counting sort keeps each bin's pieces in dealing order).
  std::vector<uint64_t> start(bins + 1, 0);
  for (const Piece& p : pieces) ++start[p.bin + 1];
  for (uint64_t j = 0; j < bins; ++j) start[j + 1] += start[j];
  std::vector<uint32_t> by_bin(pieces.size());
  {
    std::vector<uint64_t> fill(start.begin(), start.end() - 1);
    for (size_t i = 0; i < pieces.size(); ++i) by_bin[fill[pieces[i].bin]++] = uint32_t(i);
  }
  plan.sample_ids.reserve(n_samples + uint64_t(W));
  plan.micro_batches.reserve(pieces.size());
  plan.rank_begin.reserve(bins + 1);
  for (uint64_t t = 0; t < steps; ++t) {
    StepInfo info;
    for (int r = 0; r < W; ++r) {
      const uint32_t j = perm[t * uint64_t(W) + uint64_t(r)];
      for (uint64_t k = start[j]; k < start[j + 1]; ++k) {
        const Piece& p = pieces[by_bin[k]];
        if (p.new_mb || plan.micro_batches.size() == plan.rank_begin.back()) {
          MicroBatch mb;
          mb.begin = uint32_t(plan.sample_ids.size());
          mb.bucket = p.bucket;
          plan.micro_batches.push_back(mb);
        }
        plan.micro_batches.back().count += p.count;
        for (uint32_t i = 0; i < p.count; ++i) plan.sample_ids.push_back(pool.ids[p.begin + i]);
        info.samples += p.count;
        info.tokens += uint64_t(tokens[p.bucket]) * p.count;
      }
      if (start[j] == start[j + 1]) {
        // Fewer samples than ranks (tiny pool): pad with the cheapest sample of the epoch.
        const size_t cheapest = order.back();
        MicroBatch mb;
        mb.begin = uint32_t(plan.sample_ids.size());
        mb.count = 1;
        mb.bucket = uint16_t(cheapest);
        mb.padded = 1;
        plan.sample_ids.push_back(pool.ids[pool.begin[cheapest]]);
        plan.micro_batches.push_back(mb);
        ++info.samples, ++info.padded, ++plan.padded_samples;
        info.tokens += uint64_t(tokens[cheapest]);
      }
      plan.rank_begin.push_back(plan.micro_batches.size());
    }
    plan.steps.push_back(info);
  }
  if (plan.padded_samples > 0 && pr.end_policy == EndPolicy::kDrop) {
    // The only step could not give every rank work: drop it.
    for (const MicroBatch& mb : plan.micro_batches)
      if (!mb.padded)
        for (uint32_t i = 0; i < mb.count; ++i) plan.dropped.push_back(plan.sample_ids[mb.begin + i]);
    Plan empty;
    empty.strategy = plan.strategy;
    empty.world_size = W;
    empty.dropped = std::move(plan.dropped);
    return empty;
  }
  return plan;
}

}  // namespace adaptiveload
