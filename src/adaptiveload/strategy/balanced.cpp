// balanced (ours): every global step gives each rank about the same amount of work.
//
// The epoch is planned as a whole, as K * W "bins" (one per rank and step). The step count K
// is chosen, from K_lo = ceil(R / (W * C)) (total work R, per-rank step budget C) upwards,
// to minimise the epoch time K * (LB(K * W) + all-reduce), where LB(m) = max(t_1, R / m,
// t_m + t_(m+1)) is the classic lower bound of scheduling sorted items t_1 >= t_2 >= ... on m
// machines; the best few candidates (one past 2M samples) are dealt for real and the fastest
// kept. Fewer steps than that would force two long clips into some bins.
//
// Dealing: samples go longest first (LPT) to the least-loaded bin; once samples are short, a
// bin takes as many of one bucket as bring it level with the next-least-loaded bin (water
// filling), at least enough to pay for a new micro-batch's overhead. Long clips thus spread
// one per bin and short clips and images fill the gaps, so every bin ends within about one
// short sample of the others. A bin's samples of one bucket form one micro-batch (several
// when the dual constraint caps its size); a rank with several micro-batches in a step runs
// them with gradient accumulation. Bins are shuffled into steps, so each step mixes buckets
// and the step order changes with the seed and epoch.
//
// A first pass counts each bin's samples and micro-batches; the second deals again and
// writes ids straight into the plan, so no intermediate list of assignments is kept
// (~50 bytes per sample at 10M samples x 1024 ranks).
//
// Times are integer nanosecond "ticks" rounded once from the cost model, so every decision is
// integer arithmetic and identical on every rank.
#include <algorithm>
#include <cmath>

#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/rng.h"

namespace adaptiveload {
namespace {

// Step counts dealt for real (a full pass each); past kSearchSamples samples only the one with
// the best lower bound is, which keeps 10M samples x 1024 ranks within seconds.
constexpr size_t kBalancedCandidates = 3;
constexpr uint64_t kSearchSamples = 2'000'000;

// Saturates at 2^60 ticks (~36 years; the planner refuses a sample slower than 1e9 s), so a
// non-finite or huge time never reaches llround; sums are bounded in plan_balanced.
constexpr double kMaxTicks = double(int64_t(1) << 60);
int64_t to_ticks(double seconds) {
  const double t = seconds * 1e9;
  if (!(t < kMaxTicks)) return int64_t(kMaxTicks);
  return std::max<int64_t>(1, std::llround(t));
}

// Binary min-heap of (load, bin) with replace-top; ties go to the lowest bin index.
class BinHeap {
 public:
  explicit BinHeap(uint64_t bins) : h_(bins) {
    for (uint64_t j = 0; j < bins; ++j) h_[j] = {0, uint32_t(j)};  // all zero: already a heap
  }
  const std::pair<int64_t, uint32_t>& top() const { return h_[0]; }
  // Load of the second-least-loaded bin (the top's own load when it is alone).
  int64_t second() const {
    if (h_.size() == 1) return h_[0].first;
    if (h_.size() == 2) return h_[1].first;
    return std::min(h_[1].first, h_[2].first);
  }
  void replace_top_load(int64_t load) {
    h_[0].first = load;
    size_t i = 0;
    const size_t n = h_.size();
    for (;;) {
      size_t l = 2 * i + 1, r = l + 1, m = i;
      if (l < n && h_[l] < h_[m]) m = l;
      if (r < n && h_[r] < h_[m]) m = r;
      if (m == i) return;
      std::swap(h_[i], h_[m]);
      i = m;
    }
  }

 private:
  std::vector<std::pair<int64_t, uint32_t>> h_;
};

struct Inputs {
  const BucketedPool* pool;
  std::vector<size_t> order;  // buckets with samples, longest sample first
  std::vector<int64_t> per, fixed, mem_cap;
};

// Where the second pass writes: per bin, its next sample slot and its micro-batch cursor.
struct Writer {
  Plan* plan;
  std::vector<uint64_t> next_sample;
  std::vector<uint64_t> next_mb;
};

struct Counts {
  std::vector<int64_t> load;      // ticks per bin
  std::vector<uint32_t> samples;  // per bin
  std::vector<uint32_t> mbs;      // micro-batches per bin
};

// Deals every sample to `bins` bins; with a writer, also writes the plan's ids and
// micro-batches. Both passes make identical decisions.
Counts deal(uint64_t bins, const Inputs& in, Writer* w) {
  Counts c;
  c.load.assign(bins, 0);
  c.samples.assign(bins, 0);
  c.mbs.assign(bins, 0);
  BinHeap heap(bins);
  std::vector<uint16_t> last_bucket(bins, kNoBucket);  // bucket of each bin's latest micro-batch
  std::vector<uint32_t> open_count(bins, 0);           // samples in that micro-batch
  for (size_t b : in.order) {
    uint64_t next = in.pool->begin[b];
    const uint64_t end = in.pool->begin[b + 1];
    const int64_t per = in.per[b], fixed = in.fixed[b], cap = in.mem_cap[b];
    // A new micro-batch takes at least enough samples to cover its own overhead.
    const int64_t min_new = std::max<int64_t>(1, (fixed + per - 1) / per);
    while (next < end) {
      const auto [load, j] = heap.top();
      const bool merge = last_bucket[j] == b && int64_t(open_count[j]) < cap;
      const int64_t gap = heap.second() - load - (merge ? 0 : fixed);
      int64_t n = std::max<int64_t>(merge ? 1 : min_new, gap > 0 ? (gap + per - 1) / per : 1);
      n = std::min<int64_t>({n, int64_t(end - next), merge ? cap - int64_t(open_count[j]) : cap});
      if (w) {
        Plan& plan = *w->plan;
        if (merge) {
          plan.micro_batches[w->next_mb[j] - 1].count += uint32_t(n);
        } else {
          MicroBatch& mb = plan.micro_batches[w->next_mb[j]++];
          mb.begin = uint32_t(w->next_sample[j]);
          mb.count = uint32_t(n);
          mb.bucket = uint16_t(b);
        }
        std::copy(in.pool->ids.begin() + int64_t(next), in.pool->ids.begin() + int64_t(next) + n,
                  plan.sample_ids.begin() + int64_t(w->next_sample[j]));
        w->next_sample[j] += uint64_t(n);
      }
      if (merge) {
        open_count[j] += uint32_t(n);
      } else {
        last_bucket[j] = uint16_t(b), open_count[j] = uint32_t(n);
        ++c.mbs[j];
      }
      c.samples[j] += uint32_t(n);
      next += uint64_t(n);
      c.load[j] = load + n * per + (merge ? 0 : fixed);
      heap.replace_top_load(c.load[j]);
    }
  }
  return c;
}

// Epoch ticks of a dealing once bins are laid out as steps by `perm`.
int64_t epoch_ticks(const Counts& c, const std::vector<uint32_t>& perm, int W, int64_t allreduce) {
  int64_t total = 0;
  for (size_t t = 0; t < perm.size() / size_t(W); ++t) {
    int64_t mx = 0;
    for (int r = 0; r < W; ++r) mx = std::max(mx, c.load[perm[t * size_t(W) + size_t(r)]]);
    total += mx + allreduce;
  }
  return total;
}

std::vector<uint32_t> shuffled_bins(uint64_t bins, Rng rng) {
  std::vector<uint32_t> perm(bins);
  for (uint64_t j = 0; j < bins; ++j) perm[j] = uint32_t(j);
  rng.shuffle(perm);
  return perm;
}

}  // namespace

Plan plan_balanced(const PlanProblem& pr) {
  const int W = pr.world_size;
  const size_t nb = pr.buckets->size();
  Plan plan;
  plan.strategy = "balanced";
  plan.world_size = W;
  const BucketedPool pool = shuffled_by_bucket(pr);
  const uint64_t n_samples = pool.ids.size();
  if (n_samples == 0) return plan;
  if (n_samples > UINT32_MAX) throw ConfigError("balanced: more than 2^32 samples in one epoch");

  Inputs in;
  in.pool = &pool;
  in.mem_cap = dual_batch_sizes(pr);  // micro-batches obey the dual constraint
  in.per.resize(nb);
  in.fixed.resize(nb);
  std::vector<int64_t> tokens(nb);
  for (size_t b = 0; b < nb; ++b) {
    const Bucket& bk = (*pr.buckets)[b];
    tokens[b] = bk.tokens;
    in.per[b] = to_ticks(pr.cost->marginal_time(1, bk));
    in.fixed[b] = std::max<int64_t>(0, to_ticks(pr.cost->microbatch_time(1, bk)) - in.per[b]);
  }
  const int64_t cap = to_ticks(pr.step_budget_s);
  uint64_t work = 0;      // ticks, without per-micro-batch overheads
  double work_bound = 0;  // ticks, every sample in its own micro-batch (an upper bound)
  for (size_t b = 0; b < nb; ++b) {
    const uint64_t n = pool.begin[b + 1] - pool.begin[b];
    if (n == 0) continue;
    if (in.fixed[b] + in.per[b] > cap)
      throw ConfigError("step budget " + std::to_string(pr.step_budget_s) + " s is below the time of one sample of bucket " +
                        (*pr.buckets)[b].name() + " (" + std::to_string(double(in.fixed[b] + in.per[b]) * 1e-9) +
                        " s); raise --step-budget or leave it on auto");
    work += n * uint64_t(in.per[b]);
    work_bound += double(n) * double(in.per[b] + in.fixed[b]);
    in.order.push_back(b);
  }
  // Loads and epoch times are sums of ticks: refuse an epoch that would not fit them.
  const int64_t allreduce = to_ticks(pr.allreduce_s);
  if (work_bound + double(allreduce) * double(n_samples) > 4e18)
    throw ConfigError(
        "balanced: the epoch's estimated time is beyond 100 years; check the cost model, the "
        "device "
        "preset and --step-budget");
  std::stable_sort(in.order.begin(), in.order.end(), [&](size_t x, size_t y) { return in.per[x] > in.per[y]; });

  // Candidate step counts, by the lower bound of their epoch time.
  // W x cap may exceed 2^64 ticks; then one step holds all the work (work <= 4e18).
  const bool wc_fits = uint64_t(cap) <= UINT64_MAX / uint64_t(W);
  const uint64_t wc = wc_fits ? uint64_t(W) * uint64_t(cap) : UINT64_MAX;
  const uint64_t k_lo = std::max<uint64_t>(1, work / wc + (work % wc != 0 ? 1 : 0));
  const uint64_t k_hi =
      n_samples >= uint64_t(W) ? std::max<uint64_t>(1, n_samples / uint64_t(W)) : 1;
  auto item = [&](uint64_t m) -> int64_t {  // m-th longest sample's ticks, 1-based; 0 past the end
    for (size_t b : in.order) {
      const uint64_t n = pool.begin[b + 1] - pool.begin[b];
      if (m <= n) return in.per[b];
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
  candidates.resize(std::min<size_t>(candidates.size(), n_samples <= kSearchSamples ? kBalancedCandidates : 1));

  // First pass: count each candidate, keep the fastest.
  const Rng rng = Rng::for_purpose(pr.seed, uint64_t(pr.epoch), kPurposeBalancedDraw | (pr.segment << 8));
  Counts best;
  std::vector<uint32_t> perm;
  int64_t best_ticks = INT64_MAX;
  for (const auto& cand : candidates) {
    const uint64_t bins = cand.second * uint64_t(W);
    if (bins > UINT32_MAX) throw ConfigError("balanced: more than 2^32 rank-steps in one epoch");
    Counts counts = deal(bins, in, nullptr);
    std::vector<uint32_t> p = shuffled_bins(bins, rng);
    const int64_t ticks = epoch_ticks(counts, p, W, allreduce);
    if (ticks < best_ticks) best_ticks = ticks, best = std::move(counts), perm = std::move(p);
  }
  const uint64_t bins = perm.size();
  const uint64_t steps = bins / uint64_t(W);

  // Lay the bins out in (step, rank) order, then deal again writing in place.
  Writer w;
  w.plan = &plan;
  w.next_sample.resize(bins);
  w.next_mb.resize(bins);
  uint64_t total_mbs = 0;
  plan.rank_begin.reserve(bins + 1);
  uint64_t total_samples = 0;
  for (uint64_t i = 0; i < bins; ++i) {
    const uint32_t j = perm[i];
    w.next_sample[j] = total_samples;
    w.next_mb[j] = total_mbs;
    total_samples += best.samples[j];
    total_mbs += best.mbs[j] + (best.samples[j] == 0 ? 1 : 0);  // an empty bin gets a padded one
    plan.rank_begin.push_back(total_mbs);
  }
  plan.sample_ids.reserve(total_samples + uint64_t(W));
  plan.sample_ids.resize(total_samples);
  plan.micro_batches.resize(total_mbs);
  const Counts again = deal(bins, in, &w);
  (void)again;

  // Fewer samples than ranks (tiny pool): empty bins repeat the epoch's cheapest sample.
  for (uint64_t i = 0; i < bins; ++i) {
    const uint32_t j = perm[i];
    if (best.samples[j] != 0) continue;
    const size_t cheapest = in.order.back();
    MicroBatch& mb = plan.micro_batches[plan.rank_begin[i]];
    mb.begin = uint32_t(plan.sample_ids.size());
    mb.count = 1;
    mb.bucket = uint16_t(cheapest);
    mb.padded = 1;
    plan.sample_ids.push_back(pool.ids[pool.begin[cheapest]]);
    ++plan.padded_samples;
  }
  plan.steps.resize(steps);
  for (uint64_t t = 0; t < steps; ++t) {
    StepInfo& info = plan.steps[t];
    for (uint64_t m = plan.rank_begin[t * uint64_t(W)]; m < plan.rank_begin[(t + 1) * uint64_t(W)]; ++m) {
      const MicroBatch& mb = plan.micro_batches[m];
      info.samples += mb.count;
      info.tokens += uint64_t(tokens[mb.bucket]) * mb.count;
      if (mb.padded) info.padded += mb.count;
    }
  }
  if (plan.padded_samples > 0 && pr.end_policy == EndPolicy::kDrop) {
    // The only step could not give every rank work: drop it.
    Plan dropped;
    dropped.strategy = plan.strategy;
    dropped.world_size = W;
    for (const MicroBatch& mb : plan.micro_batches)
      if (!mb.padded) dropped.dropped.insert(dropped.dropped.end(), plan.ids(mb), plan.ids(mb) + mb.count);
    return dropped;
  }
  return plan;
}

}  // namespace adaptiveload
