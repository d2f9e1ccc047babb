#pragma once
// The dealer behind deal_to_speeds (rank_speeds.h): a plan's samples dealt again to ranks of
// unequal speed, per step, per slot or over the whole epoch (bodies in rank_dealer.cpp).
// Included by rank_speeds.cpp only.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "adaptiveload/cost/shape.h"
#include "adaptiveload/strategy/balanced/rank_speeds.h"

namespace adaptiveload {
namespace rank_dealing {

// A micro-batch being built for one rank.
struct Mb {
  uint16_t bucket = 0;
  uint8_t padded = 0;
  uint8_t group = 1;             // sequence-parallel group size (its ranks hold copies)
  uint64_t shared = UINT64_MAX;  // a wide micro-batch's: the plan's micro-batch it came from
  std::vector<uint32_t> ids;
  MicroShape shape;
  int64_t tokens = 0;
  double cost = 0;
};

struct Sample {
  double per;  // seconds per sample of its bucket
  uint16_t bucket;
  uint32_t id;
};

class Dealer {
 public:
  Dealer(const Plan& plan, const BalancedProblem& pr) : plan_(plan), pr_(pr), caps_(rank_caps(pr)) {
    for (size_t r = 0; r < size_t(plan.world_size); ++r) speeds_ += pr.layout.speed(r);
  }

  // The seconds `s` adds to rank r's micro-batch `mb` (null: a new one), or a negative
  // number where it does not fit there (another bucket, the rank's cap or memory).
  double added(size_t r, const Mb* mb, const Sample& s) const;
  void put(Mb& mb, const Sample& s) const;
  Sample sample(uint32_t id) const;
  Mb copy_of(uint64_t m) const;
  static void sort_longest_first(std::vector<Sample>& v);

  // Step sync: the step's trained samples dealt again, longest first, each where it ends
  // soonest; padded repeats stay on their ranks.
  std::vector<std::vector<Mb>> step(size_t t) const;
  // step's part: `samples` longest first, each onto the rank where it ends soonest after its
  // `load` (per rank, cost at the reference's speed), joining that rank's open one-GPU
  // micro-batch where it fits.
  void deal_soonest(std::vector<Sample>& samples, std::vector<std::vector<Mb>>& out,
                    std::vector<double>& load) const;

  // Micro sync: slot i of step t, one micro-batch a rank, shared out by speed.
  std::vector<Mb> slot(size_t t, uint64_t i) const;
  // slot's part: the micro-batches `in` of `ranks` (indexed by rank) shared among those ranks
  // by speed into `out` (bucketed: each rank keeps a bucket, the longest micro-batch's to the
  // fastest); false where a sample has no room.
  bool share_slot(const std::vector<Mb>& in, std::vector<size_t> ranks, std::vector<Mb>& out) const;

  // Plans with sequence-parallel groups (rank_groups.cpp). A wide micro-batch (a group of g
  // ranks, Mb::group) is one entry on each rank of its aligned block, the copies alike
  // (Mb::shared: the plan's micro-batch it came from); it runs at the block's slowest rank.
  // Step sync, step t: the wide micro-batches, largest group first and longest first, each to
  // the aligned block (within its ranks' memory) where it ends soonest; then the one-GPU
  // samples, longest first, each to the rank where it ends soonest after that; padded repeats
  // stay where they are.
  std::vector<std::vector<Mb>> group_step(size_t t) const;
  // Step t as planned, each micro-batch with its group (group_step's fallback).
  std::vector<std::vector<Mb>> planned_step(size_t t) const;
  // Micro-batch m of the plan (rank r's in step t) with its group: a wide one keyed by its
  // block's first rank's copy (the same index there), its cost the group's.
  Mb group_copy(size_t t, size_t r, uint64_t m) const;
  // Micro sync, slot i of step t: where the slot's wide micro-batches are of one group size,
  // the longest to the fastest block (within its ranks' memory); the one-GPU micro-batches
  // shared by speed among the ranks they leave (share_slot). Padded slots as planned.
  std::vector<Mb> group_slot(size_t t, uint64_t i) const;

  // Step sync, the whole epoch at once: every trained sample, longest first, to the rank-step it
  // ends soonest on (per speed class, its least-loaded rank-step), K steps as planned; padded
  // repeats stay where they are. Where balanced's steps hold long clips alone (W of them to a
  // step) a slow rank cannot be given less within the step; across the epoch it can.
  std::vector<std::vector<Mb>> epoch() const;

  // Step sync, the whole epoch dealt against each step's share of the time (rank_fill.cpp):
  // step t may take its work as planned over the ranks' speeds, rank r speed_r times that (its
  // bound). Every trained sample, longest first, to the rank-step where it ends within its
  // step's bound with the least room left; where it fits none, to the one whose step's bound
  // grows least (the bound is then that rank-step's end, so the step takes more alike). A
  // slow rank then holds fewer long clips where the step's others are short and as many where
  // they are long, unlike epoch(), which levels every rank-step.
  // The samples go to steps within windows of kFillWindow consecutive steps (a window's
  // samples among its steps), so the cost grows with samples x kFillWindow, not x K.
  // `lumped` > 0: in each window where the slowest ranks' share of the work is more than its
  // short samples (those that end on them within the window's mean bound), `lumped` times the
  // estimated share of its steps is lengthened to the longest sample on the slowest ranks (each
  // of them can then take one while the faster take more), the window's other steps shortened
  // by as much; empty where no window is lengthened.
  static constexpr size_t kFillWindow = 64;
  std::vector<std::vector<Mb>> fill(double lumped = 0) const;

  // Lumped steps or slots (fill, form_slots): the share of `steps` steps (or slots) that would
  // let the slowest ranks take their part of the work of `samples` (their speeds' share) where
  // the short samples (those that end on them within `mean_bound`) fall short of it: one lump
  // (a sample longer than that, of their mean) per slowest rank in each. 0 where the short
  // samples suffice.
  double lumped_share(const std::vector<Sample>& samples, double mean_bound, size_t steps) const;

  // `samples` onto one micro-batch each of `ranks` (fastest first, as many samples as ranks at
  // least): the longest one to each rank in turn, then each sample where it ends soonest.
  bool share(std::vector<Sample>& samples, const std::vector<size_t>& ranks,
             std::vector<Mb>& out) const;

  // Micro sync, a step's slots formed anew, where the slots as planned cannot be shared out
  // (a rank's micro-batch at its memory while a slower one could take less): the step's
  // samples longest first, each slot giving rank r about speed_r x T of work (T from the step's
  // work over the slots its fastest ranks' memory needs), the last slot taking the rest.
  // Empty when no such slots can be formed (padded repeats, or too few samples to give every
  // rank one in every slot).
  std::vector<std::vector<Mb>> reslot(size_t t) const;

  // Slots of one micro-batch a rank from `samples` (their work and tokens summed), at least
  // `least` of them: each slot gives rank r about speed_r x T of work, T the work over the
  // slots the ranks' memory needs (the rank of least memory per speed sets it), the last slot
  // taking the rest. Per rank its micro-batches; empty when no such slots can be formed.
  // `ration` (unequal ranks whose longest samples only the fast ranks take, one a micro-batch):
  // a slower rank takes at most its share, over the slots left, of the samples it can end
  // within the slot's time (their work and their count), so that it has short work in every
  // slot; the slot count grows until such slots form, the fastest of a few counts kept.
  // The slot count form_slots starts from: the work over the slots the ranks' memory needs
  // (the rank of least memory per speed sets it), at least `least`.
  size_t slot_count(double work, double tokens, size_t least) const;
  // `lumped`: the first that many slots lengthened so that each slowest rank can take the
  // longest sample left while the fastest take as many as their speed over its (slots_of).
  std::vector<std::vector<Mb>> form_slots(std::vector<Sample> samples, double work, double tokens,
                                          size_t least, bool ration = false,
                                          size_t lumped = 0) const;

  // form_slots' part: `slots` slots from `samples` (longest first). Where the rest does not fit
  // the last slot: more slots filled to memory, or, rationed, empty (form_slots tries more).
  std::vector<std::vector<Mb>> slots_of(const std::vector<Sample>& samples, double work,
                                        size_t slots, bool ration, size_t lumped = 0) const;

  // A lumped slot's seconds (slots_of): the longest sample left on the slowest rank, and
  // round(fastest's speed over the slowest's) of them on the fastest, the longer (within the
  // fastest's micro-batch sizes).
  double lumped_slot(const std::vector<Sample>& samples, const std::vector<size_t>& run_begin,
                     const std::vector<size_t>& cursor, const std::vector<size_t>& ranks) const;

  // Sample `s` into the micro-batch of any slot where it fits its rank's memory and its slot
  // ends soonest after it; false where it fits none.
  bool place_anywhere(std::vector<std::vector<Mb>>& out, const Sample& s) const;

  // Micro sync, the whole epoch's slots formed anew (as reslot, over every trained sample),
  // dealt into the plan's steps in a snake (each step a like mix). Empty where the plan has
  // padded repeats or fewer slots than steps form.
  std::vector<std::vector<std::vector<Mb>>> epoch_slots() const;

  // Micro sync, bucketed (issue 53: balanced's slots of long clips, every rank at its memory,
  // so no rank can take what the slow one gives up): in each slot the rank that ends last
  // gives up samples while that shortens the slot by more than the sample costs over the
  // ranks' speeds. They form slots of their own, one added to each step from the last back:
  // each sample where its slot ends least later, a new slot where that is more than the
  // sample costs alone; a slot that leaves a rank without a sample is dealt into the other
  // micro-batches where they add least. Empty where nothing is given up or a sample has no room.
  // `formed`: the samples given up form their slots by speed instead (form_slots, rationed).
  std::vector<std::vector<Mb>> trim(std::vector<std::vector<Mb>> out, bool formed = false) const;

  // trim's part for slot i of a step (`ranks`: its W rank lists): the rank ending last gives
  // up its last samples into `spill` while each shortens the slot by more than it costs over
  // `speeds` (the ranks' speeds summed).
  void give_up(std::vector<Mb>* ranks, size_t i, double speeds, std::vector<Sample>& spill) const;

  // Seconds of a step of slots in micro sync (per rank its micro-batches, the same count):
  // each slot's slowest rank and its collectives not hidden.
  double micro_seconds(const std::vector<std::vector<Mb>>& ranks) const;

 private:
  const Plan& plan_;
  const BalancedProblem& pr_;
  RankCaps caps_;
  double speeds_ = 0;  // the ranks' speeds summed
};

}  // namespace rank_dealing
}  // namespace adaptiveload
