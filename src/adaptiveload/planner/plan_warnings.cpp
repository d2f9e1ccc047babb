// Targets a plan misses, in words for the user: the global batch's step count, and for
// a strategy that holds them (balanced) in step sync the per-step global batch and mix that
// docs/planner.md promises.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "adaptiveload/planner/planner.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {

uint64_t Planner::target_steps(int world_size) const {
  PlanProblem pr = problem(world_size > 0 ? world_size : cfg_.world_size, cfg_.epoch, 0, {});
  pr.pool_view = &pool_;
  return pr.target_steps();
}

std::string drop_warning(const std::string& strategy, int64_t dropped, int64_t planned,
                         bool trains_nothing) {
  if (dropped == 0 || planned <= 0) return "";
  const double frac = double(dropped) / double(planned);
  if (frac <= kDropWarnFraction) return "";
  return "strategy '" + strategy + "' drops " + thousands(dropped) + " of " + thousands(planned) +
         " samples (" + fmt("%.1f%%", 100 * frac) + ") at the epoch's end (" +
         option_word("end_policy", "drop") + (trains_nothing ? "; it trains nothing" : "") +
         "); use " + option_word("end_policy", "pad") + ", fewer ranks (" +
         option_word("world_size", Spelling::kShort) + ") or smaller batches";
}

std::string Planner::drop_warning(const Plan& plan) const {
  uint64_t trained = 0;
  for (const StepInfo& s : plan.steps) trained += s.samples;
  const int64_t planned = int64_t(bucketing_.usable) - int64_t(oversize_.size());
  return adaptiveload::drop_warning(plan.strategy, int64_t(plan.dropped.size()), planned,
                                    trained == 0);
}

std::vector<std::string> Planner::warnings(const Plan& plan) const {
  return row_warnings(plan, plan.strategy);
}

std::string Planner::batch_over_epoch() const {
  PlanProblem pr = problem(cfg_.world_size, cfg_.epoch, 0, {});
  pr.pool_view = &pool_;
  const double total = pr.batch_total();
  if (pr.batch_kind == BatchKind::kFree || !(pr.batch_target > total)) return "";
  const bool by_samples = pr.batch_kind == BatchKind::kSamples;
  const std::string unit = by_samples ? " samples" : " tokens";
  const std::string all = thousands(int64_t(total)) + unit;
  return "the global batch (" + global_batch_text_ + ") is larger than the whole epoch (" + all +
         "): a step can hold at most the epoch, so it is planned as one step of all " + all +
         ", fewer than asked; ask for at most " + all + " per step (" +
         option_word("global_batch", by_samples ? "samples:N" : "tokens:N") + ") or plan more data";
}

std::vector<std::string> Planner::row_warnings(const Plan& plan, const std::string& row) const {
  std::vector<std::string> out;
  const std::string who = "strategy '" + row + "'";
  const uint64_t W = uint64_t(plan.world_size), K = target_steps(plan.world_size),
                 steps = plan.num_steps();
  if (const std::string over = batch_over_epoch(); !over.empty()) out.push_back(who + ": " + over);
  if (K > 0 && steps != K && steps > 0) {
    // What the trained samples can fill: a sample on a sequence-parallel group of g takes g
    // rank-steps of the W a step has (its micro-batch is listed by each rank of the group).
    uint64_t rank_samples = 0, samples = 0;
    for (const MicroBatch& mb : plan.micro_batches)
      if (!mb.padded) rank_samples += mb.count;
    for (const StepInfo& s : plan.steps) samples += s.samples;
    const uint64_t cap = rank_samples / W;
    std::string why;
    if (steps < K && cap < K) {
      why = thousands(int64_t(samples)) + " samples on " + std::to_string(W) +
            " ranks fill at most " + thousands(int64_t(cap)) + " steps (one sample per rank-step" +
            (rank_samples > samples ? "; a sample on a sequence-parallel group of g takes g ranks"
                                    : "") +
            "); ask for fewer, larger steps (" + option_word("global_batch") +
            ") or plan on fewer ranks";
    } else if (steps < K) {
      const std::string slots = lockstep_slots(plan.sync)
                                    ? " (" + std::string(sync_name(plan.sync)) +
                                          " sync: every step needs a slot of " + std::to_string(W) +
                                          " micro-batches)"
                                    : "";
      why = "its micro-batches could not be cut into more steps" + slots +
            "; ask for fewer steps (" + option_word("global_batch") + ")";
    } else {
      why = "its batches could not be merged into fewer steps; ask for more steps (" +
            option_word("global_batch") + ")";
    }
    out.push_back(who + " plans " + thousands(int64_t(steps)) + " steps, not the " +
                  thousands(int64_t(K)) + " of the global batch (" + global_batch_text_ +
                  "): " + why);
  }
  bool holds = false;  // a strategy that keeps the per-step batch and mix (registry trait)
  for (const StrategyEntry& s : strategies())
    holds = holds || (plan.strategy == s.name && s.holds_batch());
  if (holds && !lockstep_slots(plan.sync) && steps == K && steps > 1) {
    // The global batch per step (tokens, or samples for samples:N) and the mix of images and
    // clips, over the steps without padded repeats.
    const bool by_samples = base_.batch_kind == BatchKind::kSamples;
    double total = 0, lo = INFINITY, hi = 0;
    uint64_t full = 0, images = 0, clips = 0, no_image = 0, no_clip = 0;
    std::vector<uint8_t> has(2);
    for (uint64_t t = 0; t < steps; ++t) {
      const StepInfo& s = plan.steps[t];
      has[0] = has[1] = 0;
      for (uint64_t m = plan.rank_begin[t * W]; m < plan.rank_begin[(t + 1) * W]; ++m) {
        const MicroBatch& mb = plan.micro_batches[m];
        if (mb.padded) continue;
        if (mb.bucket != kPackedBucket) {
          const bool image = bucketing_.buckets[mb.bucket].frames == 1;
          has[image] = 1;
          (image ? images : clips) += mb.count;
          continue;
        }
        const uint32_t* ids = plan.ids(mb);  // a pack: each sample's kind
        for (uint32_t k = 0; k < mb.count; ++k) {
          const bool image = bucketing_.buckets[bucketing_.sample_bucket[ids[k]]].frames == 1;
          has[image] = 1;
          ++(image ? images : clips);
        }
      }
      no_image += !has[1], no_clip += !has[0];
      if (s.padded > 0) continue;
      const double x = by_samples ? double(s.samples) : double(s.tokens);
      total += x, lo = std::min(lo, x), hi = std::max(hi, x), ++full;
    }
    const double mean = full > 0 ? total / double(full) : 0;
    if (mean > 0 && std::max(hi - mean, mean - lo) / mean > kMaxBatchDev)
      out.push_back(who + ": its " + (by_samples ? "samples" : "tokens") + " per step range over " +
                    fmt("%.2f", lo / mean) + "-" + fmt("%.2f", hi / mean) + "x their mean (" +
                    plan.strategy + " keeps them within " + fmt("%.0f%%", 100 * kMaxBatchDev) +
                    " where a plan it tries does, unless a bucket loader would then be faster)");
    // A kind (images, clips) the pool has at least one of for every step, missing from a step.
    for (const auto& [kind, have, missing] :
         {std::tuple{"image", images, no_image}, {"clip", clips, no_clip}})
      if (have >= steps && double(missing) > kMaxUnmixed * double(steps))
        out.push_back(
            who + ": " + thousands(int64_t(missing)) + " of " + thousands(int64_t(steps)) +
            " steps have no " + kind + " (" + plan.strategy +
            " keeps a like mix in every step where a plan it tries does, unless a bucket loader "
            "would then be faster)");
  }
  return out;
}

}  // namespace adaptiveload
