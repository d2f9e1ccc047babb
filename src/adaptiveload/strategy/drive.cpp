// Every strategy's path from the planner: drive() and the common driver (context.h).
#include "adaptiveload/strategy/context.h"
#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {

Plan drive(const StrategyEntry& s, const PlanProblem& pr, const PlanContext& ctx) {
  Plan p = s.run ? s.run(s, pr, ctx) : run_common(s, pr, ctx);
  p.strategy = s.name;
  return p;
}

Plan run_common(const StrategyEntry& s, const PlanProblem& pr, const PlanContext& ctx) {
  // A packer packs whatever --packing says (it is compared only with packing on).
  if (s.packs()) {
    if (!pr.bucket_group.empty()) throw ConfigError(ctx.packing_refusal(s));
    return s.fn(pr);
  }
  if (s.needs_fixed_batch() && pr.fixed_batch.size() != pr.buckets->size())
    throw ConfigError(ctx.search.fixed_error);
  // Samples on sequence-parallel groups: every sample on groups of the largest size any needs,
  // as W / g ranks.
  if (!pr.bucket_group.empty())
    return run_on_groups(ctx.search, s, pr, group_span(pr.bucket_group, live_buckets(pr)).max);
  return s.fn(pr);
}

std::string cannot_plan(const StrategyEntry& s, const PlanContext& ctx) {
  if (s.needs_fixed_batch() && !ctx.search.fixed_error.empty()) return ctx.search.fixed_error;
  // It would pack (a packer, or one that packs when asked with --packing on) where groups are
  // in use for it: a sample needs one, or --sp per-sample has it search groups (one that mixes
  // group sizes; a packer runs every sample on one GPU then, as the one-size strategies on g=1).
  const bool packs = s.packs() || (ctx.packing && s.packs_when_asked());
  if (packs && (ctx.groups_needed || (s.mixes_groups() && ctx.per_sample_groups)))
    return ctx.packing_refusal(s);
  return "";
}

}  // namespace adaptiveload
