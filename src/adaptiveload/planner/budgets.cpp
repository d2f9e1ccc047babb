// Budgets: M_mem (the token budget of a micro-batch), M_comp and p of the dual constraint,
// balanced's step budget, and the fixed strategy's per-bucket batch sizes, resolved once per
// planner from the configuration, the cost and memory models and the pool.
#include <algorithm>
#include <cmath>

#include "adaptiveload/planner/planner.h"
#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {
namespace {

constexpr int kCompSearchPoints = 32;

}  // namespace

// long-function: M_mem, then the M_comp search (its expected-epoch formula and the small-pool full
// search share the candidate grid), then the output checks, in order
void Planner::resolve_budgets() {
  const auto& buckets = bucketing_.buckets;
  const std::vector<uint8_t> live = live_buckets(pool_, bucketing_.sample_bucket, buckets.size());

  // M_mem: the largest token budget for which floor(M/S) samples of every bucket fit memory.
  int64_t M = cfg_.mem_budget_tokens;
  if (M <= 0) {
    M = INT64_MAX;
    // Tokens per GPU: a sample on a group of g holds S / g on each.
    auto per_gpu = [&](size_t b) {
      return (buckets[b].tokens + base_.group(uint16_t(b)) - 1) / base_.group(uint16_t(b));
    };
    for (size_t b = 0; b < buckets.size(); ++b)
      if (live[b]) M = std::min<int64_t>(M, (base_.max_batch_memory[b] + 1) * per_gpu(b) - 1);
    if (M == INT64_MAX) M = 0;
    // Never below the longest sample: each bucket's batch is capped at memory separately.
    for (size_t b = 0; b < buckets.size(); ++b)
      if (live[b]) M = std::max<int64_t>(M, per_gpu(b));
  }
  base_.mem_budget_tokens = M;
  base_.mem_budget_auto = cfg_.mem_budget_tokens <= 0;
  resolve_global_batch();
  base_.p = cfg_.p > 0 ? cfg_.p : fit_power(*cost_, buckets, bucketing_.bucket_counts).p;

  if (cfg_.comp_budget > 0) {
    base_.comp_budget = cfg_.comp_budget;
  } else if (max_group() > 1) {
    // With sequence parallelism M_comp is not searched: it never binds (dual runs as
    // equal_tokens) unless --comp-budget gives one.
    double hi = 0;
    for (size_t b = 0; b < buckets.size(); ++b)
      if (live[b])
        hi = std::max(hi, double(std::max<int64_t>(1, base_.max_batch_memory[b])) *
                              std::pow(double(buckets[b].tokens), base_.p));
    base_.comp_budget = hi;
  } else if (!pool_.empty()) {
    // Search M_comp on a geometric grid from "every bucket alone" to "never binds" for the
    // best throughput of `dual`, in expectation over its random batch order: computed from the
    // per-bucket counts in O(buckets) per candidate instead of planning the pool 32 times.
    // A dual plan sees the pool only through the counts n_b: bucket b gives floor(n_b / B_b)
    // batches of B_b and one of n_b mod B_b; the N batches are shuffled uniformly and dealt W
    // to a slot (padding repeats the first batches: distinct positions again when N >= W),
    // so every slot holds a uniform W-subset and P(max <= t_j) = C(a_j, W) / C(N, W), a_j the
    // batches no slower than t_j. One slot per step (or micro sync, where slots add up): the
    // expected epoch time follows exactly. Step sync with g > 1 slots per step: the max over
    // ranks of a sum of g batch times, taken as normal (mean g mu, sd sqrt(g) sigma, the
    // expected max of W standard normals), within [g mu, g t_max]. tests/test_scale.cpp
    // compares the pick with the full search (planning and simulating every candidate), which
    // pools of up to 2^16 samples still get.
    double lo = 0, hi = 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (!live[b]) continue;
      double sp = std::pow(double(buckets[b].tokens), base_.p);
      int64_t bmax =
          std::min<int64_t>(base_.max_batch_memory[b], std::max<int64_t>(1, M / buckets[b].tokens));
      lo = std::max(lo, sp);
      hi = std::max(hi, double(bmax) * sp);
    }
    hi = std::max(hi, lo);
    check_finite(lo, "the compute budget search's lower end (B x S^p of the longest sample)");
    check_finite(hi, "the compute budget search's upper end");
    std::vector<int64_t> count(buckets.size(), 0);
    for (uint32_t id : pool_) ++count[bucketing_.sample_bucket[id]];
    PlanProblem pr = problem(cfg_.world_size, 0, 0, {});
    pr.pool_view = &pool_;  // lent for target_steps(), not copied
    const uint64_t target_steps = pr.target_steps();
    const int64_t W = cfg_.world_size;
    const double ar = pr.step_seconds();
    // E[max of W standard normals] = int x W phi(x) Phi(x)^(W-1) dx (midpoint rule).
    double e_w = 0;
    for (int i = 0; i < 4000; ++i) {
      const double x = -8 + 16 * (i + 0.5) / 4000,
                   phi = std::exp(-0.5 * x * x) / std::sqrt(2 * 3.14159265358979323846);
      e_w += x * double(W) * phi * std::pow(0.5 * std::erfc(-x / std::sqrt(2.0)), double(W - 1)) *
             (16.0 / 4000);
    }
    std::vector<std::pair<double, int64_t>> t;  // (seconds of a batch, batches that long)
    auto expected_throughput = [&](double c) {
      pr.comp_budget = c;
      const std::vector<int64_t> B = dual_batch_sizes(pr);
      t.clear();
      int64_t N = 0, samples = 0;
      for (size_t b = 0; b < buckets.size(); ++b) {
        if (count[b] == 0) continue;
        const int64_t q = count[b] / B[b], r = count[b] % B[b];
        if (q) t.emplace_back(cost_->cost(MicroShape::uniform(B[b], buckets[b])), q);
        if (r) t.emplace_back(cost_->cost(MicroShape::uniform(r, buckets[b])), 1);
        N += q + (r > 0), samples += count[b];
      }
      std::sort(t.begin(), t.end());
      const bool pad = pr.end_policy == EndPolicy::kPad;
      const int64_t slots = pad ? (N + W - 1) / W : N / W;
      if (slots == 0) return 0.0;
      const double trained =
          pad ? double(samples) : double(samples) * double(slots * W) / double(N);
      // f(max of a slot) summed over the max's distribution.
      auto expect = [&](auto f) {
        if (N <= W) return f(t.back().first);  // one slot holds every batch
        const double lN = std::lgamma(double(N) + 1) - std::lgamma(double(N - W) + 1);
        double e = 0, prev = 0;
        int64_t a = 0;
        for (const auto& [tj, nj] : t) {
          a += nj;
          const double F =
              a < W    ? 0
              : a == N ? 1
                       : std::exp(std::lgamma(double(a) + 1) - std::lgamma(double(a - W) + 1) - lN);
          e += f(tj) * (F - prev), prev = F;
        }
        return e;
      };
      double epoch = 0;
      if (pr.layout.lockstep_slots()) {
        // One step a slot (free), or the global batch's steps; each adds its optimizer step.
        epoch = double(slots) * expect([&](double x) {
                  return x + std::max(0.0, pr.layout.exposed_slot_comm(x));
                }) +
                double(slot_step_count(uint64_t(slots), target_steps)) * ar;
      } else if (target_steps == 0 || target_steps >= uint64_t(slots)) {
        epoch = double(slots) * (expect([](double x) { return x; }) + ar);
      } else {
        double mu = 0, m2 = 0;
        for (const auto& [tj, nj] : t) mu += tj * double(nj), m2 += tj * tj * double(nj);
        mu /= double(N), m2 /= double(N);
        const double sigma = std::sqrt(std::max(0.0, m2 - mu * mu)), tmax = t.back().first;
        const uint64_t K = target_steps, g = uint64_t(slots) / K, big = uint64_t(slots) % K;
        auto step = [&](double gs) {
          return std::min(gs * tmax, std::max(gs * mu, gs * mu + std::sqrt(gs) * sigma * e_w)) + ar;
        };
        epoch = double(K - big) * step(double(g)) + double(big) * step(double(g + 1));
      }
      return epoch > 0 ? trained / epoch : 0.0;
    };
    // A small pool is planned and simulated at every candidate (its one batch order, not the
    // expectation, decides there; at most 32 plans of 2^16 samples).
    constexpr size_t kFullSearchMaxSamples = size_t(1) << 16;
    const bool full = pool_.size() <= kFullSearchMaxSamples;
    double best = lo, best_tp = -1;
    for (int i = 0; i < kCompSearchPoints; ++i) {
      double c = lo * std::pow(hi / lo, double(i) / (kCompSearchPoints - 1));
      double tp = 0;
      if (full) {
        PlanProblem fp = problem(cfg_.world_size, 0, 0, {});
        fp.pool_view = &pool_;
        fp.comp_budget = c;
        tp = simulate(plan_dual(fp)).throughput_samples_per_s;
      } else {
        tp = expected_throughput(c);
      }
      comp_search_.emplace_back(c, tp);
      if (tp > best_tp) best_tp = tp, best = c;
    }
    base_.comp_budget = best;
  }

  base_.step_budget_s = cfg_.step_budget_s > 0 ? cfg_.step_budget_s : auto_step_budget(*cost_);
  // Output check: resolved budgets are finite (inputs were range-checked on the way in).
  check_finite(base_.p, "the exponent p");
  check_finite(base_.comp_budget, "the compute budget M_comp");
  check_finite(base_.step_budget_s, "the step budget");
  check_finite(base_.allreduce_s, "the all-reduce time per step");
  if (!(base_.p > 0))
    throw ConfigError("the exponent p fitted to the cost model is " + fmt("%g", base_.p) +
                      "; pass " + option_word("p"));
}

double Planner::auto_step_budget(const CostModel& cost) const {
  // The slowest micro-batch the memory budget admits, i.e. the longest step equal_tokens
  // already runs: balanced keeps every rank busy for up to that long.
  const auto& buckets = bucketing_.buckets;
  const std::vector<uint8_t> live = live_buckets(pool_, bucketing_.sample_bucket, buckets.size());
  std::vector<int64_t> B = equal_tokens_batch_sizes(base_);
  const SeqParallel sp = seq_parallel(cfg_.world_size);
  double s = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (!live[b]) continue;
    const int g = base_.group(uint16_t(b));
    if (g > 1)  // M_mem counts tokens per GPU: a group holds g times as many
      B[b] =
          std::max<int64_t>(1, std::min<int64_t>(base_.max_batch_memory[b],
                                                 base_.mem_budget_tokens * g / buckets[b].tokens));
    s = std::max(s, group_cost(cost, MicroShape::uniform(B[b], buckets[b]), g, sp));
  }
  return s;
}

std::vector<int64_t> Planner::resolve_fixed(std::string& error) const {
  auto table = cfg_.fixed_config.empty() ? grid_.fixed_batch_sizes
                                         : load_fixed_batch_sizes(cfg_.fixed_config);
  const std::string src =
      cfg_.fixed_config.empty() ? "grid '" + grid_.name + "'" : cfg_.fixed_config;
  std::vector<int64_t> out(bucketing_.buckets.size(), 1);
  for (size_t b = 0; b < bucketing_.buckets.size(); ++b) {
    const Bucket& bk = bucketing_.buckets[b];
    auto tier = table.find(bk.tier);
    if (tier == table.end() || tier->second.upper_bound(bk.frames) == tier->second.begin()) {
      error = "fixed batch sizes of " + src + " have no entry for bucket " + bk.name() + " (tier " +
              bk.tier + ", " + std::to_string(bk.frames) + " frames); add one, or pass " +
              option_word("fixed_config", "FILE");
      return {};
    }
    out[b] = std::prev(tier->second.upper_bound(bk.frames))->second;
  }
  return out;
}

}  // namespace adaptiveload
