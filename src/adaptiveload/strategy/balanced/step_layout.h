#pragma once
// balanced, step sync: laying dealt bins out as global steps of W (a permutation of the bins,
// step-major) and measuring a layout: its epoch time, and how far its steps stray from the
// global batch and from a like mix of images and clips.
#include <cstdint>
#include <vector>

#include "adaptiveload/strategy/balanced/rank_steps.h"
#include "adaptiveload/util/rng.h"

namespace adaptiveload {

// Epoch ticks of a dealing once bins are laid out as steps by `perm`: per step its longest
// bin plus the all-reduce.
int64_t epoch_ticks(const BinCounts& c, const std::vector<uint32_t>& perm, int W,
                    int64_t allreduce);
// The bins 0..bins-1 in a seeded order (free global batch: steps of W in that order).
std::vector<uint32_t> shuffled_bins(uint64_t bins, Rng rng);
// Bins laid out step-major, W to a step, with the step order and the ranks in each step shuffled.
std::vector<uint32_t> shuffled_steps(const std::vector<uint32_t>& laid, int W, Rng rng);

struct StepSpread {
  double batch_dev = 0, unmixed = 0;
};
// `batch_dev`: the largest |x_t - mean| / mean of the steps' tokens (or samples); `unmixed`:
// the share of steps without an image (or without a clip) where the pool has one for every step.
StepSpread step_spread(const BinCounts& c, const std::vector<uint32_t>& perm, int W,
                       bool by_tokens);
// Steps for a global batch target: tall bins grouped W to a step (group_tall), the rest in a
// snake by samples (or tokens); step order and ranks shuffled.
std::vector<uint32_t> stratified_bins(const BinCounts& c, int W, bool by_tokens, bool group_tall,
                                      Rng rng);
// Evens a layout's steps in place: steps of nearby longest bins, taken two at a time, share out
// their 2W bins again so that the longer ones wait on each other (the sum of the two steps'
// longest bins falls), while (`hold` & kHoldBatch) neither step strays further from the global
// batch than kMaxBatchDev (or than the pair already did) and (`hold` & kHoldMix) the pair gains
// no step without an image or a clip. Passes repeat until one after the first changes nothing
// (at most kLevelPasses); the ranks of every changed step are shuffled with `rng`. Returns
// whether any step changed (perm is unchanged otherwise); every change lowers epoch_ticks.
bool level_steps(const BinCounts& c, std::vector<uint32_t>& perm, int W, bool by_tokens,
                 uint8_t hold, Rng rng);
constexpr int kLevelPasses = 4;

}  // namespace adaptiveload
