// balanced's one entry from the planner (drive.h): the packed-or-bucketed choice, the group
// search, the held global batch and the dealing by speed, composed here and nowhere else.
#include "adaptiveload/strategy/balanced/drive.h"

#include <algorithm>

#include "adaptiveload/strategy/balanced/balanced.h"
#include "adaptiveload/strategy/balanced/group_choice.h"
#include "adaptiveload/strategy/balanced/rank_speeds.h"
#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

// Pools up to this size are also planned bucketed under --packing on (run_balanced).
constexpr size_t kBucketedCheckSamples = 2'000'000;

// On ranks that are not alike: the plan dealt again by the ranks' speeds (rank_speeds.h).
Plan by_speed(Plan plan, const BalancedProblem& pr) {
  return pr.layout.unequal_ranks() ? deal_to_speeds(plan, pr) : plan;
}

// The best simulated throughput of the bucket loaders on pr: the strategies that neither mix
// group sizes nor pack, and can plan here.
double best_loader(const PlanProblem& pr, const PlanContext& ctx) {
  double best = 0;
  for (const StrategyEntry& other : strategies())
    if (!other.mixes_groups() && !other.packs() &&
        !(other.needs_fixed_batch() && !ctx.search.fixed_error.empty()))
      best = std::max(best, simulate(ctx.run(other, pr), ctx.search.env).throughput_samples_per_s);
  return best;
}

// Without packing: on groups of different sizes, per sample (searched, or as given by --sp
// min or G); else its plan holding the global batch where no bucket loader would beat it.
Plan run_bucketed(const StrategyEntry& s, const BalancedProblem& pr, const PlanContext& ctx) {
  if (!pr.bucket_group.empty()) {
    const auto [gmin, gmax] = group_span(pr.bucket_group, live_buckets(pr));
    if (ctx.groups_as_given)
      return gmin == gmax ? run_on_groups(ctx.search, s, pr, gmax) : plan_balanced_with(pr);
    return run_balanced_groups(ctx.search, s, pr);
  }
  if (ctx.per_sample_groups) return run_balanced_groups(ctx.search, s, pr);
  return by_speed(
      run_balanced_held(ctx.search, plan_balanced_with, pr, [&] { return best_loader(pr, ctx); }),
      pr);
}

}  // namespace

Plan run_balanced(const StrategyEntry& s, const PlanProblem& problem, const PlanContext& ctx) {
  const BalancedProblem pr(problem);  // balanced's knobs at their defaults
  if (!ctx.packing) return run_bucketed(s, pr, ctx);
  if (!pr.bucket_group.empty() || ctx.per_sample_groups) throw ConfigError(ctx.packing_refusal(s));
  BalancedProblem q = pr;
  q.packing = true;
  // It holds the global batch where that does not leave it slower than a bucket loader, and
  // keeps its bucketed plan (micro-batches of one shape are packs too) where that is faster,
  // up to kBucketedCheckSamples samples (beyond, the packed plan).
  Plan packed = by_speed(
      run_balanced_held(ctx.search, plan_balanced_with, q, [&] { return best_loader(q, ctx); }), q);
  if (pr.pool_ids().size() > kBucketedCheckSamples) return packed;
  Plan bucketed = run_bucketed(s, pr, ctx);
  const Metrics mp = simulate(packed, ctx.search.env), mb = simulate(bucketed, ctx.search.env);
  // As between packed layouts: a plan that holds the global batch (its tokens, or samples,
  // per step within kMaxBatchDev) is kept unless the other is over kHoldCost faster.
  const bool held = keeps_global_batch(mp, pr.batch_kind),
             bucketed_held = keeps_global_batch(mb, pr.batch_kind);
  const double need = held && !bucketed_held ? 1 + kHoldCost : 1.0;
  if (mb.throughput_samples_per_s <= need * mp.throughput_samples_per_s) return packed;
  bucketed.packed = true;
  return bucketed;
}

}  // namespace adaptiveload
