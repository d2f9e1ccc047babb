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
//
// Sequence parallelism (docs/planner.md, "Sequence parallelism"): a micro-batch may run on a
// group of g ranks (Ulysses: each holds S / g tokens of every sample and all-to-alls switch
// between sequence and head sharding around self-attention). Groups are aligned blocks of
// consecutive ranks, [r - r % g, r - r % g + g), g a power of two, so that the process groups
// can be created once at start-up.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace adaptiveload {

enum class SyncMode : uint8_t { kStep = 0, kMicro = 1 };

// The sync modes by name, one line each: the one list the option check (--sync, the
// sampler's sync, planner/option_ranges.cpp), the state's "sync", the messages and
// sync_name read, and what each mode asks of a plan. Code asks the mode's traits
// (lockstep_slots, auto_sync_mode), never whether it is "the micro one".
struct SyncModeName {
  SyncMode mode;
  const char* name;
  const char* engines;  // the training engines that synchronise this way
  // Every rank runs the same number of micro-batches in a step and the ranks meet at every
  // micro-batch slot (collectives in every micro-batch); else they meet once per step.
  bool lockstep_slots;
  // The mode `--sync auto` picks when the model state is sharded (true) or not (false).
  bool auto_when_sharded;
};
inline constexpr SyncModeName kSyncModes[] = {
    {SyncMode::kStep, "step", "DDP, ZeRO-1", false, false},
    {SyncMode::kMicro, "micro", "FSDP, ZeRO-2/3", true, true},
};

inline const SyncModeName& sync_mode_name(SyncMode s) {
  for (const SyncModeName& m : kSyncModes)
    if (m.mode == s) return m;
  return kSyncModes[0];
}
inline const char* sync_name(SyncMode s) { return sync_mode_name(s).name; }
// Whether a plan of mode `s` runs in lockstep slots (SyncModeName::lockstep_slots).
inline bool lockstep_slots(SyncMode s) { return sync_mode_name(s).lockstep_slots; }
// The mode `--sync auto` resolves to for a model state that is `sharded` or not.
inline SyncMode auto_sync_mode(bool sharded) {
  for (const SyncModeName& m : kSyncModes)
    if (m.auto_when_sharded == sharded) return m.mode;
  return kSyncModes[0].mode;
}
// The mode called `name`; false (and `out` unchanged) when no mode is.
inline bool parse_sync(const std::string& name, SyncMode& out) {
  for (const SyncModeName& m : kSyncModes)
    if (name == m.name) return out = m.mode, true;
  return false;
}
// The names joined for messages: "step or micro", "\"step\" or \"micro\"" (quote), or with
// the engines, "step (DDP, ZeRO-1) or micro (FSDP, ZeRO-2/3)".
inline std::string sync_names(const char* quote = "", bool engines = false) {
  std::string out;
  const size_t n = sizeof kSyncModes / sizeof kSyncModes[0];
  for (size_t i = 0; i < n; ++i)
    out += std::string(i == 0       ? ""
                       : i + 1 == n ? " or "
                                    : ", ") +
           quote + kSyncModes[i].name + quote +
           (engines ? std::string(" (") + kSyncModes[i].engines + ")" : "");
  return out;
}

constexpr int kMaxGroup = 128;  // largest sequence-parallel group (Plan::mb_group is a byte)

// Ulysses sequence parallelism: which group sizes are allowed and what their all-to-alls cost.
struct SeqParallel {
  uint32_t sizes = 1;  // bit k set: groups of 2^k ranks allowed (bit 0, g = 1, always)
  // Per sample of S video tokens on g > 1 ranks: the all-to-alls of one forward + backward
  // take a2a_s_per_token * S * (g - 1) / g^2 seconds (bytes over the in-node bandwidth) plus
  // a2a_latency_s per micro-batch.
  double a2a_s_per_token = 0;
  double a2a_latency_s = 0;
  bool allows(int g) const {
    return g >= 1 && g <= kMaxGroup && (g & (g - 1)) == 0 &&
           (sizes >> __builtin_ctz(unsigned(g)) & 1u);
  }
  int largest() const { return 1 << (31 - __builtin_clz(sizes | 1u)); }
};

struct ParallelLayout {
  SyncMode sync = SyncMode::kStep;
  // step mode: the gradient all-reduce of one global step, seconds.
  double step_sync_s = 0;
  // micro mode: the collectives of one micro-batch slot (parameter all-gather in forward,
  // again in backward when parameters are resharded after forward, gradient reduce-scatter),
  // seconds, and the fraction of them that can overlap the slot's compute.
  double slot_comm_s = 0;
  double overlap = 0;
  // Every mode: seconds each global step spends once beside its micro-batches and collectives
  // (the optimizer step), from a calibrated profile's "step"; 0 without one.
  double step_fixed_s = 0;
  SeqParallel sp;
  // Sequence-parallel groups are aligned blocks of consecutive ranks in every mode (sp).
  // Ranks that are not alike (--devices, --rank-speed; docs/planner.md, "Unequal ranks"): per
  // rank, the work it does per second relative to the cost model's device (rank r runs a
  // micro-batch of cost c in c / rank_speed[r] seconds). Empty: every rank at 1.
  std::vector<double> rank_speed;
  // Per rank, its device's speed alone, relative to the cost model's device (rank_speed without
  // --rank-speed's or learned factors). Empty: as rank_speed's, every rank's device alike.
  std::vector<double> device_speed;
  bool unequal_ranks() const { return !rank_speed.empty(); }
  double speed(size_t r) const { return rank_speed.empty() ? 1.0 : rank_speed[r]; }
  // A group of g ranks from `first` runs at its slowest member's speed.
  double group_speed(size_t first, int g) const {
    double s = speed(first);
    for (size_t k = first + 1; k < first + size_t(g) && !rank_speed.empty(); ++k)
      s = std::min(s, rank_speed[k]);
    return s;
  }

  // The constraint the layout puts on a plan: every rank runs the same number of micro-batches
  // in a step, in lockstep slots (collectives in every micro-batch: FSDP, ZeRO-2/3). Strategies
  // read this, not the mode's name.
  bool lockstep_slots() const { return adaptiveload::lockstep_slots(sync); }

  // Seconds of a slot's collectives not hidden behind `compute_s` of its compute: at most
  // `overlap` of them overlap, and never more than the compute they hide behind.
  double exposed_slot_comm(double compute_s) const {
    return slot_comm_s - std::min(overlap * slot_comm_s, std::max(0.0, compute_s));
  }
};

}  // namespace adaptiveload
