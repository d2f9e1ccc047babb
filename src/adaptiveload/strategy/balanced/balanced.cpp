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
// A first pass counts each bin's samples and micro-batches and logs its decisions (bin, count,
// merge: 8 bytes per micro-batch piece, not per sample); the second replays the log and
// writes ids straight into the plan, so the heap is walked once and no list of per-sample
// assignments is kept (~50 bytes per sample at 10M samples x 1024 ranks).
//
// Times are integer nanosecond "ticks" rounded once from the cost model, so every decision is
// integer arithmetic, exact and the same on every rank.
//
// The choice among dealings for a given step count is one stage, deal_steps (balanced.h), that
// balanced on sequence-parallel groups calls too, for its one-GPU samples around the wide
// micro-batches it placed first (strategy/sp_groups.cpp).
#include "adaptiveload/strategy/balanced/balanced.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <utility>

#include "adaptiveload/strategy/balanced/rank_steps.h"
#include "adaptiveload/strategy/balanced/step_layout.h"
#include "adaptiveload/strategy/packing.h"
#include "adaptiveload/strategy/plan_writer.h"
#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/option_word.h"
#include "adaptiveload/util/rng.h"

namespace adaptiveload {
namespace {

// Step counts dealt for real (a full pass each); past kSearchSamples samples only the one with
// the best lower bound is, which keeps 10M samples x 1024 ranks within seconds.
constexpr size_t kBalancedCandidates = 3;
constexpr uint64_t kSearchSamples = 2'000'000;

}  // namespace

DealInputs deal_inputs(const PlanProblem& pr, const BucketedPool& pool,
                       const std::vector<uint8_t>& take) {
  const size_t nb = pr.buckets->size();
  DealInputs in;
  in.pool = &pool;
  in.mem_cap = dual_batch_sizes(pr);  // micro-batches obey the dual constraint
  in.per.resize(nb);
  in.fixed.resize(nb);
  in.tokens.resize(nb);
  in.min_new.resize(nb);
  in.image.resize(nb);
  for (size_t b = 0; b < nb; ++b) {
    const Bucket& bk = (*pr.buckets)[b];
    in.tokens[b] = bk.tokens;
    in.image[b] = bk.frames == 1;
    const SampleTicks one = sample_ticks(pr, bk);
    in.per[b] = one.per;
    in.fixed[b] = one.fixed;
    // A new micro-batch takes at least enough samples to cover its own overhead.
    in.min_new[b] = std::max<int64_t>(1, (in.fixed[b] + in.per[b] - 1) / in.per[b]);
    if (pool.begin[b + 1] > pool.begin[b] && (take.empty() || take[b])) in.order.push_back(b);
  }
  std::stable_sort(in.order.begin(), in.order.end(),
                   [&](size_t x, size_t y) { return in.per[x] > in.per[y]; });
  return in;
}

// long-function: the dealing candidates (minimum micro-batch shares, whole batches, images first)
// are tried over the same inputs and compared in one place
StepDeal deal_steps(const BalancedProblem& pr, const DealInputs& in, uint64_t K, int64_t allreduce,
                    std::vector<DealInputs> extra) {
  StepDeal out;
  // The step count is given (the user's global batch, at most one sample per bin; or, on
  // sequence-parallel groups, that path's own). Candidates differ in how large a micro-batch
  // must be: a new one takes at least enough samples that
  // its fixed cost (overhead and small-batch inefficiency) is at most a share `f` of it
  // (f = 1: it only covers itself), or the bucket's whole dual-constraint batches are
  // dealt longest first (LPT). The fastest is kept.
  const int W = pr.world_size;
  const size_t nb = in.per.size();
  const uint64_t bins = K * uint64_t(W);
  if (bins > UINT32_MAX) throw ConfigError("balanced: more than 2^32 rank-steps in one epoch");
  const bool started = in.start != nullptr;
  const BucketedPool& pool = *in.pool;
  uint64_t n_samples = 0, work = 0;
  for (size_t b : in.order) {
    const uint64_t n = pool.begin[b + 1] - pool.begin[b];
    n_samples += n, work += n * uint64_t(in.per[b]);
  }
  const Rng rng = problem_rng(pr, kPurposeBalancedDraw);
  const bool by_tokens = pr.batch_kind == BatchKind::kTokens;
  std::vector<DealInputs> cands;
  // Per-bin level if every sample were in one micro-batch per bucket and bin: the scale
  // of the two-phase split (coarse: one sample over a fraction of it).
  double level = double(work);
  for (size_t b : in.order)
    level += double(in.fixed[b]) *
             std::ceil(double(pool.begin[b + 1] - pool.begin[b]) / double(in.mem_cap[b]));
  level /= double(bins);
  const double shares[] = {1.0, 0.25, 0.1};
  const double coarse[] = {0, 1.0 / 8, 1.0 / 3};
  for (double f : shares) {
    for (double q : coarse) {
      // With start loads, bins keep their steps: one phase (phase two lays bins out anew).
      if (started ? q != 0 || (n_samples > kSearchSamples && f != 0.25)
                  : n_samples > kSearchSamples && (f != 0.25 || q != 1.0 / 8))
        continue;
      DealInputs c = in;
      c.world_size = W;
      c.coarse_threshold = int64_t(q * level);
      for (size_t b = 0; b < nb; ++b) {
        // In double first, capped before the conversion (fixed / per can be large).
        const double need = std::ceil(double(c.fixed[b]) / (f * double(c.per[b])));
        c.min_new[b] =
            need >= double(c.mem_cap[b]) ? c.mem_cap[b] : std::max<int64_t>(1, int64_t(need));
      }
      cands.push_back(std::move(c));
    }
  }
  // Whole batches: of the dual constraint's sizes, and of the memory budget's (a bucket
  // loader's B = M_mem / S: the fewest fixed costs; dealing, not M_comp, balances them).
  for (int sizes = 0; sizes < 2 && n_samples <= kSearchSamples; ++sizes) {
    DealInputs c = in;
    c.whole = true;
    if (sizes == 1) {
      c.mem_cap = equal_tokens_batch_sizes(pr);
      if (c.mem_cap == in.mem_cap) break;
    }
    std::stable_sort(c.order.begin(), c.order.end(), [&](size_t x, size_t y) {
      return c.fixed[x] + c.mem_cap[x] * c.per[x] > c.fixed[y] + c.mem_cap[y] * c.per[y];
    });
    cands.push_back(std::move(c));
  }
  if (!started) {
    // Images first, cut evenly over the bins, then the clips LPT onto them: a like mix in
    // every step by construction (when there are images for every bin).
    DealInputs c = in;
    c.world_size = W;
    c.images_first = true;
    std::stable_partition(c.order.begin(), c.order.end(),
                          [&](size_t b) { return c.image[b] != 0; });
    uint64_t images = 0;
    for (size_t b : c.order)
      if (c.image[b]) images += pool.begin[b + 1] - pool.begin[b];
    if (images >= bins && images < n_samples && n_samples <= kSearchSamples)
      cands.push_back(std::move(c));
  }
  if (!started && n_samples <= kSearchSamples) {
    // The cut's total load counts the fixed cost of every micro-batch, which only a cut
    // knows (one per bucket a bin spans): refined from two trial cuts, so the last bin
    // does not collect the estimate's error.
    DealInputs c = in;
    c.contiguous = true;
    for (int it = 0; it < 2; ++it) {
      const BinCounts trial = deal_contiguous(bins, c, nullptr);
      double total = 0;
      for (int64_t x : trial.load) total += double(x);
      c.contiguous_total = total;
    }
    cands.push_back(std::move(c));
  }
  for (DealInputs& c : extra) cands.push_back(std::move(c));
  // Every rank-step gets work (K <= n / W, so there is a sample for every bin): a
  // candidate that leaves a bin empty is not kept. If none of the candidates above is full,
  // plain LPT (new micro-batches of one sample or more, one phase) is: it gives every bin a
  // sample before any bin a second one.
  // (Fewer samples than ranks: one step, whose empty bins repeat a sample, as in free mode.)
  // A bin that starts with work is not empty; with start loads, the plain LPT is kept even
  // where it leaves a bin empty (its caller fills them).
  uint64_t open_bins = bins;
  if (started)
    open_bins = uint64_t(std::count(in.start->load.begin(), in.start->load.end(), int64_t(0)));
  const bool can_fill = n_samples >= open_bins;
  auto has_empty = [&](const BinCounts& counts) {
    for (uint64_t j = 0; j < bins; ++j)
      if (counts.samples[j] == 0 && (!started || in.start->load[j] == 0)) return true;
    return false;
  };
  // The global batch and the step mix (BalancedProblem::hold): a layout whose steps' tokens
  // (samples for samples:N) stray over kMaxBatchDev from their mean misses the global batch;
  // one with more than kMaxUnmixed of its steps lacking images (or clips) that the pool has
  // enough of misses the mix. The fastest layout that keeps what is held is kept: both,
  // else the batch, else the mix, else the fastest of all. Each dealing is laid out twice: long
  // bins grouped into steps of their own (fewest waits on them) and every bin in one snake
  // (the evenest steps); each layout is also tried evened (level_steps: steps re-split two
  // at a time so long bins wait on each other, keeping the batch and the mix that are held).
  // With start loads, bin r * K + t stays rank r of step t (the work it started with is
  // there), and the steps' spread counts the starting work too.
  struct Pick {
    std::shared_ptr<BinCounts> counts;
    std::vector<uint32_t> perm;
    const DealInputs* inputs = nullptr;
    int64_t ticks = INT64_MAX;
  };
  Pick fastest, batch_ok, mix_ok, both_ok;
  const Rng level_rng = problem_rng(pr, kPurposeLevelSteps);
  auto evaluate = [&](const DealInputs& c, bool keep_empty) {
    auto counts = std::make_shared<BinCounts>(c.contiguous ? deal_contiguous(bins, c, nullptr)
                                                           : deal_bins(bins, c, nullptr));
    if (can_fill && !keep_empty && has_empty(*counts)) return;
    if (started && !counts->logged) return;  // its pieces are read back from the log
    auto consider = [&](const std::vector<uint32_t>& p) {
      const int64_t ticks = epoch_ticks(*counts, p, W, allreduce);
      auto keep = [&](Pick& k) { k.counts = counts, k.perm = p, k.inputs = &c, k.ticks = ticks; };
      StepSpread sp;
      if (started && !in.start->samples.empty()) {
        // The spread of what the steps hold: the dealt samples and the starting work.
        BinCounts all;
        all.samples = counts->samples, all.tokens = counts->tokens, all.images = counts->images;
        for (uint64_t j = 0; j < bins; ++j)
          all.samples[j] += in.start->samples[j], all.tokens[j] += in.start->tokens[j],
              all.images[j] += in.start->images[j];
        sp = step_spread(all, p, W, by_tokens);
      } else {
        sp = step_spread(*counts, p, W, by_tokens);
      }
      const bool batch = sp.batch_dev <= kMaxBatchDev, mixed = sp.unmixed <= kMaxUnmixed;
      if (ticks < fastest.ticks) keep(fastest);
      if (batch && ticks < batch_ok.ticks) keep(batch_ok);
      if (mixed && ticks < mix_ok.ticks) keep(mix_ok);
      if (batch && mixed && ticks < both_ok.ticks) keep(both_ok);
    };
    if (started) {
      std::vector<uint32_t> p(bins);
      for (uint64_t t = 0; t < K; ++t)
        for (uint64_t r = 0; r < uint64_t(W); ++r) p[t * uint64_t(W) + r] = uint32_t(r * K + t);
      consider(p);
      return;
    }
    for (const bool group_tall : {true, false}) {
      std::vector<uint32_t> p = stratified_bins(*counts, W, by_tokens, group_tall, rng);
      consider(p);
      // The same layout evened (always faster where it changes; kept where the holds judge it
      // better). Up to kSearchSamples samples, as the other extra candidates (at 10M samples
      // x 8 ranks it took a third of the plan's time).
      if (pr.even_steps() && n_samples <= kSearchSamples &&
          level_steps(*counts, p, W, by_tokens, pr.hold, level_rng))
        consider(p);
    }
  };
  auto choose = [&] {
    const bool hb = pr.hold & kHoldBatch, hm = pr.hold & kHoldMix;
    const Pick* k = hb && hm && both_ok.counts ? &both_ok
                    : hb && batch_ok.counts    ? &batch_ok
                    : hm && mix_ok.counts      ? &mix_ok
                                               : &fastest;
    if (!k->counts) return;
    // Moved, not copied: the picks are not read again (a deal's log is 8 bytes a piece).
    out.counts = std::move(*k->counts), out.perm = std::move(k->perm), out.inputs = *k->inputs,
    out.ticks = k->ticks;
  };
  for (const DealInputs& c : cands) evaluate(c, false);
  DealInputs plain = in;
  if (!fastest.counts) {
    plain.world_size = W;
    std::fill(plain.min_new.begin(), plain.min_new.end(), int64_t(1));
    evaluate(plain, started);
  }
  choose();
  if (out.perm.empty()) throw std::logic_error("balanced: plain LPT left a rank-step empty");
  return out;
}

Plan plan_balanced(const PlanProblem& pr) { return plan_balanced_with(BalancedProblem(pr)); }

// long-function: the step-count search, the dealing and the in-place writing of the bins, in order,
// over one set of deal inputs
Plan plan_balanced_with(const BalancedProblem& pr) {
  if (pr.packing) return plan_balanced_packed(pr);
  if (!pr.bucket_group.empty()) return plan_balanced_groups(pr);
  if (pr.layout.lockstep_slots()) return plan_balanced_micro(pr);
  const int W = pr.world_size;
  const size_t nb = pr.buckets->size();
  Plan plan = empty_plan(pr, "balanced");
  const BucketedPool pool = shuffled_by_bucket(pr);
  const uint64_t n_samples = pool.ids.size();
  if (n_samples == 0) return plan;
  if (n_samples > UINT32_MAX) throw ConfigError("balanced: more than 2^32 samples in one epoch");

  DealInputs in = deal_inputs(pr, pool, {});
  const int64_t cap = to_ticks(pr.step_budget_s);
  uint64_t work = 0;      // ticks, without per-micro-batch overheads
  double work_bound = 0;  // ticks, every sample in its own micro-batch (an upper bound)
  for (size_t b = 0; b < nb; ++b) {
    const uint64_t n = pool.begin[b + 1] - pool.begin[b];
    if (n == 0) continue;
    if (in.fixed[b] + in.per[b] > cap)
      throw ConfigError("step budget " + std::to_string(pr.step_budget_s) +
                        " s is below the time of one sample of bucket " + (*pr.buckets)[b].name() +
                        " (" + std::to_string(double(in.fixed[b] + in.per[b]) * 1e-9) +
                        " s); raise " + option_word("step_budget_s") + " or leave it on auto");
    work += n * uint64_t(in.per[b]);
    work_bound += double(n) * double(in.per[b] + in.fixed[b]);
  }
  // Loads and epoch times are sums of ticks: refuse an epoch that would not fit them.
  const int64_t allreduce = to_ticks(pr.step_seconds());
  if (work_bound + double(allreduce) * double(n_samples) > 4e18)
    throw ConfigError(
        "balanced: the epoch's estimated time is beyond 100 years; check the cost model, the "
        "device "
        "preset and " +
        option_word("step_budget_s"));

  const Rng rng = problem_rng(pr, kPurposeBalancedDraw);
  BinCounts best;
  std::vector<uint32_t> perm;
  int64_t best_ticks = INT64_MAX;
  DealInputs chosen = in;
  const uint64_t target = pr.target_steps();
  if (target == 0) {
    // Candidate step counts, by the lower bound of their epoch time.
    // W x cap may exceed 2^64 ticks; then one step holds all the work (work <= 4e18).
    const bool wc_fits = uint64_t(cap) <= UINT64_MAX / uint64_t(W);
    const uint64_t wc = wc_fits ? uint64_t(W) * uint64_t(cap) : UINT64_MAX;
    const uint64_t k_lo = std::max<uint64_t>(1, work / wc + (work % wc != 0 ? 1 : 0));
    const uint64_t k_hi =
        n_samples >= uint64_t(W) ? std::max<uint64_t>(1, n_samples / uint64_t(W)) : 1;
    auto item =
        [&](uint64_t m) -> int64_t {  // m-th longest sample's ticks, 1-based; 0 past the end
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
      const double lb =
          std::max({double(item(1)), double(work) / double(m), double(item(m) + item(m + 1))});
      candidates.push_back({double(k) * (lb + double(allreduce)), k});
      if (double(k) * double(allreduce) > candidates.front().first * 2)
        break;  // only more all-reduces from here
    }
    std::sort(candidates.begin(), candidates.end());
    candidates.resize(
        std::min<size_t>(candidates.size(), n_samples <= kSearchSamples ? kBalancedCandidates : 1));

    // First pass: count each candidate, keep the fastest.
    for (const auto& cand : candidates) {
      const uint64_t bins = cand.second * uint64_t(W);
      if (bins > UINT32_MAX) throw ConfigError("balanced: more than 2^32 rank-steps in one epoch");
      BinCounts counts = deal_bins(bins, in, nullptr);
      std::vector<uint32_t> p = shuffled_bins(bins, rng);
      const int64_t ticks = epoch_ticks(counts, p, W, allreduce);
      if (ticks < best_ticks) best_ticks = ticks, best = std::move(counts), perm = std::move(p);
    }
  } else {
    // The user's global batch fixes the step count (at most one sample per bin); deal_steps
    // chooses the dealing.
    const uint64_t k_max = n_samples >= uint64_t(W) ? n_samples / uint64_t(W) : 1;
    const uint64_t K = std::max<uint64_t>(1, std::min(target, k_max));
    StepDeal d = deal_steps(pr, in, K, allreduce, {});
    best = std::move(d.counts), perm = std::move(d.perm), chosen = std::move(d.inputs),
    best_ticks = d.ticks;
  }
  const uint64_t bins = perm.size();

  // Lay the bins out in (step, rank) order (an empty bin gets a padded micro-batch), then deal
  // again writing in place.
  BinWriter w = lay_out_bins(plan, best, perm, true, uint64_t(W));
  if (chosen.contiguous) {
    deal_contiguous(bins, chosen, &w);
  } else if (best.logged) {
    replay_deal(best, chosen, w);
    std::vector<uint64_t>().swap(best.log);
  } else {
    deal_bins(bins, chosen, &w);
  }

  // Fewer samples than ranks (tiny pool): empty bins repeat the epoch's cheapest sample.
  for (uint64_t i = 0; i < bins; ++i) {
    const uint32_t j = perm[i];
    if (best.samples[j] != 0) continue;
    const SlotItem pad = padded_repeat(pool, cheapest_bucket(pool, in.per));
    MicroBatch& mb = plan.micro_batches[plan.rank_begin[i]];
    mb.begin = uint32_t(plan.sample_ids.size());
    mb.count = pad.count;
    mb.bucket = pad.bucket;
    mb.padded = pad.padded;
    plan.sample_ids.push_back(pool.ids[pad.begin]);
  }
  total_steps(pr, plan);
  // The only step could not give every rank work: dropped under --end-policy drop.
  return drop_padded_only_step(pr, std::move(plan), "balanced");
}

}  // namespace adaptiveload
