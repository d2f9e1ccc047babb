#pragma once
// balanced's own problem: the problem every strategy gets (PlanProblem) and the knobs only
// balanced has, set by its driver (drive.h) and read by its stages.
#include <cstdint>

#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

struct BalancedProblem : PlanProblem {
  BalancedProblem() = default;
  // The common problem with balanced's defaults (every invariant held, bucketed).
  explicit BalancedProblem(const PlanProblem& pr) : PlanProblem(pr) {}
  // Step sync with a global batch: the invariants its plan keeps where a layout it tries does
  // (kHoldBatch: tokens or samples per step within kMaxBatchDev; kHoldMix: images and clips in
  // every step, kMaxUnmixed), else the fastest. Its driver lets go of them, one at a time,
  // where a bucket loader would be faster (run_balanced_held, group_choice.h).
  uint8_t hold = kHoldBatch | kHoldMix;
  // Packed micro-batches (--packing on, strategy/packing.h): a micro-batch may hold samples of
  // any buckets, each pack within mem_budget_tokens video tokens and, by `memory` of its
  // shape, within usable_bytes of device memory.
  bool packing = false;
  // Step sync with a global batch: also try each layout evened (level_steps); not for a state
  // saved before it (layout release 1), so that its epoch resumes as planned.
  bool even_steps() const { return layout_release >= 2; }
};

// balanced's plan of its own problem (plan_balanced is this with balanced's defaults).
Plan plan_balanced_with(const BalancedProblem& pr);

}  // namespace adaptiveload
