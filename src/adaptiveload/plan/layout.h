#pragma once
// The parallel layout: how the ranks of a job run a plan, in one place that the strategies,
// the plan format, the simulator and the sampler share (docs/planner.md, "Sync modes").
//
//   step   DDP, ZeRO-1: gradients are synchronised once per global step, after the
//          accumulation; ranks may run different numbers of micro-batches in a step.
//   micro  FSDP / FSDP2 / HSDP, ZeRO-2/3: every micro-batch's forward and backward run
//          collectives (parameter all-gather, gradient reduce-scatter) that every rank
//          joins, so every rank runs the same number of micro-batches in every step and
//          the ranks meet at every micro-batch "slot".
#include <algorithm>
#include <cstdint>
#include <string>

namespace adaptiveload {

enum class SyncMode : uint8_t { kStep = 0, kMicro = 1 };

inline const char* sync_name(SyncMode s) { return s == SyncMode::kMicro ? "micro" : "step"; }

struct ParallelLayout {
  SyncMode sync = SyncMode::kStep;
  // step mode: the gradient all-reduce of one global step, seconds.
  double step_sync_s = 0;
  // micro mode: the collectives of one micro-batch slot (parameter all-gather in forward,
  // again in backward when parameters are resharded after forward, gradient reduce-scatter),
  // seconds, and the fraction of them that can overlap the slot's compute.
  double slot_comm_s = 0;
  double overlap = 0;

  // Seconds of a slot's collectives not hidden behind `compute_s` of its compute: at most
  // `overlap` of them overlap, and never more than the compute they hide behind.
  double exposed_slot_comm(double compute_s) const {
    return slot_comm_s - std::min(overlap * slot_comm_s, std::max(0.0, compute_s));
  }
};

}  // namespace adaptiveload
