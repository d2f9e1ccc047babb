#pragma once
// The sampler's resumable state: small (well under 1 KB), independent of dataset size.
// Restoring it with the same world size yields exactly the remaining steps of the plan;
// with another world size, the samples not yet trained are planned anew for it (elastic),
// none lost and none repeated. `segments` records (world size, steps done) for each world
// size the epoch has run under, the last one being the current.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "adaptiveload/plan/layout.h"

namespace adaptiveload {

struct PlanState {
  static constexpr int kVersion = 1;
  int version = kVersion;
  std::string strategy;
  uint64_t fingerprint = 0;  // of the manifest and the planner configuration
  uint64_t seed = 0;
  int64_t epoch = 0;
  std::vector<std::pair<int, int64_t>> segments;
  // Sync mode the plan was made for; a state without it is step.
  SyncMode sync = SyncMode::kStep;
  // How balanced laid its bins out as steps (PlanProblem::layout_release; BalancedProblem::
  // even_steps): 3, on ranks that are not alike also lumped steps and slots and a faster
  // rank's micro-batch sizes grown with its speed (strategy/balanced/rank_speeds.h); 2, each
  // layout also tried evened (strategy/balanced/step_layout.h); 1, as before that, which a
  // state without "layout" (saved by an earlier release) was planned with, so its epoch
  // resumes exactly as it was saved. Epochs planned after it are planned as kLayout.
  static constexpr int kLayout = 3;
  int layout = kLayout;
  // Per segment, the cost model it was planned with when online adaptation replaced the
  // configured one: a compact JSON object {"a","b","c0","overhead_s","half_efficiency_tokens"}
  // (seconds per sample a*S + b*S^2 + c0; "pack_sample_s" too where a fit on packs gave one),
  // or "" for the configured model. Empty or the same length as `segments`.
  std::vector<std::string> segment_costs;
  const std::string& cost_of(size_t segment) const;
  // Per segment, the rank speed factors online adaptation learned (cost/speed_learning.h), one
  // per rank of the segment's world size, multiplying the configured speeds; empty where none
  // was learned (every factor 1). Empty or the same length as `segments`; JSON "speeds", written
  // only when some segment has factors, so other states read and write as before.
  std::vector<std::vector<double>> segment_speeds;
  const std::vector<double>& speeds_of(size_t segment) const;
};

// Learned factors as a segment keeps them: empty when every factor is 1 (the configured speeds).
// Throws InputError unless each factor is finite and in (0, 100].
std::vector<double> canonical_speeds(const std::vector<double>& speeds);

// Checks a cost object of segment_costs; throws InputError naming the problem.
std::string canonical_cost_json(const std::string& text);

std::string state_to_json(const PlanState& s);
// Throws InputError with the reason when the text is not a valid state of this version.
PlanState state_from_json(const std::string& text);

}  // namespace adaptiveload
