#include "adaptiveload/strategy/balanced/rank_speeds.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <unordered_map>

#include "adaptiveload/cost/shape.h"
#include "adaptiveload/strategy/balanced/rank_dealer.h"

namespace adaptiveload {
namespace {

using rank_dealing::Dealer;
using rank_dealing::Mb;

// The plan's frame (steps, padding) with no micro-batches yet.
Plan frame_of(const Plan& plan, const BalancedProblem& pr) {
  Plan out;
  out.strategy = plan.strategy;
  out.world_size = plan.world_size;
  out.sync = plan.sync;
  out.steps = plan.steps;
  out.padded_samples = plan.padded_samples;
  out.dropped = plan.dropped;
  out.packed = plan.packed || pr.packing;
  out.sample_ids.reserve(plan.sample_ids.size());
  out.micro_batches.reserve(plan.micro_batches.size());
  return out;
}

// Seconds of the epoch's compute in step sync (each step its slowest rank) and the largest
// deviation of a step's tokens from their mean.
struct StepFigures {
  double seconds = 0, tokens_dev = 0;
};
StepFigures step_figures(const std::vector<std::vector<Mb>>& bins, size_t W,
                         const PlanProblem& pr) {
  StepFigures f;
  std::vector<double> tokens(bins.size() / W, 0.0);
  for (size_t t = 0; t < tokens.size(); ++t) {
    double slowest = 0;
    for (size_t r = 0; r < W; ++r) {
      double x = 0;
      for (const Mb& mb : bins[t * W + r]) {
        x += mb.cost;
        if (!mb.padded) tokens[t] += double(mb.tokens);
      }
      slowest = std::max(slowest, x / pr.layout.speed(r));
    }
    f.seconds += slowest;
  }
  const double mean = std::accumulate(tokens.begin(), tokens.end(), 0.0) /
                      double(std::max<size_t>(1, tokens.size()));
  for (double x : tokens)
    if (mean > 0) f.tokens_dev = std::max(f.tokens_dev, std::abs(x - mean) / mean);
  return f;
}

// Each step's trained samples and tokens from its rank lists (step-major, W a step).
void recount_steps(Plan& out, const std::vector<std::vector<Mb>>& bins, size_t W) {
  for (size_t t = 0; t < out.steps.size(); ++t) {
    StepInfo& si = out.steps[t];
    si.samples = 0, si.tokens = 0;
    for (size_t r = 0; r < W; ++r)
      for (const Mb& mb : bins[t * W + r])
        if (!mb.padded) si.samples += uint32_t(mb.ids.size()), si.tokens += uint64_t(mb.tokens);
  }
}

void append(Plan& out, const std::vector<Mb>& mbs) {
  for (const Mb& mb : mbs) {
    MicroBatch m;
    m.begin = uint32_t(out.sample_ids.size());
    m.count = uint32_t(mb.ids.size());
    m.bucket = mb.bucket;
    m.padded = mb.padded;
    out.sample_ids.insert(out.sample_ids.end(), mb.ids.begin(), mb.ids.end());
    out.micro_batches.push_back(m);
  }
  out.rank_begin.push_back(out.micro_batches.size());
}

// A rank's micro-batches into a plan with sequence-parallel groups: a wide one's copies on its
// block share their sample ids (one `begin`, as the planner writes them: `begin_of`, by
// Mb::shared), and each micro-batch's group size goes to mb_group.
void append_groups(Plan& out, const std::vector<Mb>& mbs,
                   std::unordered_map<uint64_t, uint32_t>& begin_of) {
  for (const Mb& mb : mbs) {
    MicroBatch m;
    m.count = uint32_t(mb.ids.size());
    m.bucket = mb.bucket;
    m.padded = mb.padded;
    auto it = mb.group > 1 ? begin_of.find(mb.shared) : begin_of.end();
    if (it != begin_of.end()) {
      m.begin = it->second;
    } else {
      m.begin = uint32_t(out.sample_ids.size());
      out.sample_ids.insert(out.sample_ids.end(), mb.ids.begin(), mb.ids.end());
      if (mb.group > 1) begin_of.emplace(mb.shared, m.begin);
    }
    out.micro_batches.push_back(m);
    out.mb_group.push_back(mb.group);
  }
  out.rank_begin.push_back(out.micro_batches.size());
}

// Plans with sequence-parallel groups: each step (step sync) or slot (micro sync) dealt again
// by speed, the wide micro-batches on aligned blocks (Dealer::group_step, group_slot).
Plan deal_groups(const Plan& plan, const BalancedProblem& pr) {
  Plan out = frame_of(plan, pr);
  const Dealer dealer(plan, pr);
  const size_t W = size_t(plan.world_size);
  std::unordered_map<uint64_t, uint32_t> begin_of;
  for (size_t t = 0; t < plan.num_steps(); ++t) {
    std::vector<std::vector<Mb>> ranks(W);
    if (!lockstep_slots(plan.sync)) {
      ranks = dealer.group_step(t);
    } else {
      const auto [b0, e0] = plan.rank_range(t, 0);
      for (uint64_t i = 0; i < e0 - b0; ++i) {
        std::vector<Mb> slot = dealer.group_slot(t, i);
        for (size_t r = 0; r < W; ++r) ranks[r].push_back(std::move(slot[r]));
      }
    }
    for (const std::vector<Mb>& rank : ranks) append_groups(out, rank, begin_of);
  }
  return out;
}

}  // namespace

Plan deal_to_speeds(const Plan& plan, const BalancedProblem& pr) {
  if (!pr.layout.unequal_ranks()) return plan;
  if (!plan.mb_group.empty()) return deal_groups(plan, pr);
  Plan out = frame_of(plan, pr);
  const Dealer dealer(plan, pr);
  const size_t W = size_t(plan.world_size);
  if (!lockstep_slots(plan.sync)) {
    // Candidates: each step dealt again (balanced's steps kept), and the whole epoch dealt again
    // over the same step count, levelled (epoch) or against each step's share (fill), that with
    // lumped steps at 1, 0.75 and 0.5 times their estimated share (empty where none). The
    // fastest is kept; where the global batch is held (tokens per step within kMaxBatchDev) by
    // the first, one that strays must be kHoldCost faster.
    std::vector<std::vector<Mb>> steps;
    steps.reserve(plan.num_steps() * W);
    for (size_t t = 0; t < plan.num_steps(); ++t)
      for (std::vector<Mb>& rank : dealer.step(t)) steps.push_back(std::move(rank));
    std::vector<std::vector<std::vector<Mb>>> cands = {dealer.epoch(), dealer.fill()};
    if (pr.lumped_layouts())  // states of earlier releases: without them
      for (const double share : {1.0, 0.75, 0.5}) cands.push_back(dealer.fill(share));
    const StepFigures a = step_figures(steps, W, pr);
    const bool held = pr.batch_kind != BatchKind::kFree && (pr.hold & kHoldBatch);
    int pick = -1;
    double best = a.seconds;
    for (int k = 0; k < int(cands.size()); ++k) {
      if (cands[k].empty()) continue;
      const StepFigures b = step_figures(cands[k], W, pr);
      const double need =
          held && a.tokens_dev <= kMaxBatchDev && b.tokens_dev > kMaxBatchDev ? 1 + kHoldCost : 1.0;
      if (b.seconds * need < best) pick = k, best = b.seconds * need;
    }
    for (const std::vector<Mb>& rank : pick < 0 ? steps : cands[pick]) append(out, rank);
    if (pick >= 0) recount_steps(out, cands[pick], W);
    return out;
  }
  // Micro sync, two candidates as in step sync: each step's slots shared out by speed (or its
  // slots formed anew, reslot, where that is faster), and the whole epoch's slots formed anew.
  std::vector<std::vector<Mb>> steps, epoch;
  double per_step = 0, whole = 0;
  for (size_t t = 0; t < plan.num_steps(); ++t) {
    const auto [b0, e0] = plan.rank_range(t, 0);
    std::vector<std::vector<Mb>> ranks(W);
    for (uint64_t i = 0; i < e0 - b0; ++i) {
      std::vector<Mb> slot = dealer.slot(t, i);
      for (size_t r = 0; r < W; ++r) ranks[r].push_back(std::move(slot[r]));
    }
    std::vector<std::vector<Mb>> anew = dealer.reslot(t);
    if (!anew.empty() && dealer.micro_seconds(anew) < dealer.micro_seconds(ranks))
      ranks = std::move(anew);
    per_step += dealer.micro_seconds(ranks);
    for (std::vector<Mb>& rank : ranks) steps.push_back(std::move(rank));
  }
  for (std::vector<std::vector<Mb>>& step : dealer.epoch_slots()) {
    whole += dealer.micro_seconds(step);
    for (std::vector<Mb>& rank : step) epoch.push_back(std::move(rank));
  }
  if (!pr.packing) {  // the slow ranks' samples given up into slots of their own, if faster
    const std::vector<std::vector<Mb>> base = steps;
    for (const bool formed : {false, true}) {
      std::vector<std::vector<Mb>> trimmed = dealer.trim(base, formed);
      double seconds = 0;
      for (size_t t = 0; !trimmed.empty() && t < plan.num_steps(); ++t)
        seconds += dealer.micro_seconds({trimmed.begin() + std::ptrdiff_t(t * W),
                                         trimmed.begin() + std::ptrdiff_t((t + 1) * W)});
      if (!trimmed.empty() && seconds < per_step) steps = std::move(trimmed), per_step = seconds;
    }
  }
  bool use_epoch = false;
  if (!epoch.empty()) {
    const bool held = pr.batch_kind != BatchKind::kFree && (pr.hold & kHoldBatch);
    const double a = step_figures(steps, W, pr).tokens_dev,
                 b = step_figures(epoch, W, pr).tokens_dev;
    const double need = held && a <= kMaxBatchDev && b > kMaxBatchDev ? 1 + kHoldCost : 1.0;
    use_epoch = whole * need < per_step;
  }
  for (const std::vector<Mb>& rank : use_epoch ? epoch : steps) append(out, rank);
  if (use_epoch) recount_steps(out, epoch, W);
  return out;
}

}  // namespace adaptiveload
