#pragma once
// Stragglers found online (docs/planner.md, "Stragglers found online"): a speed factor per rank
// learned from the compute seconds every rank measures and all ranks gather each step. Each
// rank-step gives a ratio, measured seconds over the seconds the cost model predicts for the
// rank's work at its configured speed (--devices, --rank-speed); within a step the ratios are
// taken relative to the step's lower median rank, which cancels what every rank shares (the cost
// model's scale, a slow step for all); a rank's factor is 1 over the median of its relative
// ratios across a window of steps, so a one-step spike moves nothing (a straggler is slow for
// many steps). Hysteresis: a factor moves only when the estimate differs from it by more than
// `tolerance` (or, where larger, the rank's scatter in the window: the median absolute deviation
// of its relative ratios over their median), and an estimate within that of 1 is 1 (a rank that
// recovers gets its work back exactly). Pure arithmetic on its inputs: every rank reaches the
// same factors from the same gathered times, with no communication of its own.
#include <cstddef>
#include <vector>

namespace adaptiveload {

struct SpeedLearning {
  double tolerance = 0.08;  // share by which an estimate must differ to move a factor
  size_t min_steps = 3;     // a rank's steps in the window before its factor may move
  double lowest = 0.05;     // factors are clamped to [lowest, highest]
  double highest = 20.0;
};

// window: [step][rank] measured / predicted seconds of each rank-step, the last steps observed
// (a value that is not finite and > 0: the rank had no work that step); current: the factors in
// effect, one per rank (1: as configured). Returns the new factors, rounded to 0.01. Throws
// InputError when a row or `current` does not hold one value per rank.
std::vector<double> learn_rank_speeds(const std::vector<std::vector<double>>& window,
                                      const std::vector<double>& current,
                                      const SpeedLearning& params = {});

}  // namespace adaptiveload
