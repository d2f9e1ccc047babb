#pragma once
// balanced, step sync: dealing the bucketed pool's samples to K * W rank-steps ("bins", one per
// rank and step) so that every bin ends with about the same load (strategy/balanced.cpp says
// how). A counting pass deals and logs its decisions; the writing pass replays them (or deals
// again) and writes the plan's ids and micro-batches in place. Loads are Ticks.
#include <cstdint>
#include <vector>

#include "adaptiveload/strategy/stages.h"

namespace adaptiveload {

struct DealInputs {
  const BucketedPool* pool;
  std::vector<size_t> order;  // buckets with samples, longest sample first
  std::vector<int64_t> per, fixed, mem_cap, tokens;
  std::vector<uint8_t> image;    // per bucket: one frame
  std::vector<int64_t> min_new;  // fewest samples a new micro-batch of the bucket takes
  bool whole = false;            // deal whole micro-batches of mem_cap samples (LPT), no merging
  bool contiguous = false;       // deal_contiguous instead of LPT
  // Images first (their buckets lead `order`): the image pool is cut into one run of about
  // equal count per bin, so every bin (and step) holds images, then the rest is dealt LPT
  // onto those loads.
  bool images_first = false;
  double contiguous_total = 0;  // its total load (0: estimated from the batch counts)
  // Two phases (0: one): buckets whose one sample costs more than this ("coarse") are dealt
  // first; then the bins are grouped into steps by their coarse load (W to a step, heaviest
  // first), and the rest ("fine": short clips, images) fills every bin of a step led by a
  // heavy bin up to that bin's level instead of leaving its ranks idle (see deal_bins()).
  int64_t coarse_threshold = 0;
  int world_size = 1;
  // Bins that start with work (balanced on sequence-parallel groups: the wide micro-batches
  // placed first): per bin its starting load and its offset, the load it may carry beyond the
  // others (the heap orders bins by load - offset, as phase two does). Null: every bin starts
  // at 0. Not with coarse_threshold, images_first or contiguous, which lay the bins out anew.
  // Held by the caller, shared by every candidate (one per bin: as many as the samples).
  struct StartLoads {
    std::vector<int64_t> load, offset;
    // What the starting work holds, for the steps' spread (a micro-batch on a group of ranks
    // counted once, at its first rank); empty: nothing.
    std::vector<uint32_t> samples, images;
    std::vector<uint64_t> tokens;
  };
  const StartLoads* start = nullptr;
  // Given micro-batches instead of `order`'s buckets (start loads only): dealt whole in this
  // order, each to the bin of least load - offset, none merged; `cost` is its load.
  struct Piece {
    int64_t cost;
    uint32_t n;
    uint16_t bucket;
  };
  std::vector<Piece> pieces;
};

// Where the second pass writes: per bin, its next sample slot and its micro-batch cursor.
struct BinWriter {
  Plan* plan;
  std::vector<uint64_t> next_sample;
  std::vector<uint64_t> next_mb;

  // Writes n samples of bucket b, from position `next` of the bucketed pool, into bin j:
  // appended to its latest micro-batch (merge) or as a new one.
  void put(const BucketedPool& pool, uint32_t j, size_t b, uint64_t next, int64_t n, bool merge) {
    if (merge) {
      plan->micro_batches[next_mb[j] - 1].count += uint32_t(n);
    } else {
      MicroBatch& mb = plan->micro_batches[next_mb[j]++];
      mb.begin = uint32_t(next_sample[j]);
      mb.count = uint32_t(n);
      mb.bucket = uint16_t(b);
    }
    // Mostly a few ids: a loop, not a memmove call per piece.
    const uint32_t* from = pool.ids.data() + next;
    uint32_t* to = plan->sample_ids.data() + next_sample[j];
    for (int64_t i = 0; i < n; ++i) to[i] = from[i];
    next_sample[j] += uint64_t(n);
  }
};

struct BinCounts {
  std::vector<int64_t> load;      // ticks per bin
  std::vector<uint32_t> samples;  // per bin
  std::vector<uint32_t> mbs;      // micro-batches per bin
  std::vector<uint64_t> tokens;   // per bin
  std::vector<uint32_t> images;   // per bin: samples of one-frame buckets (the step-mix check)
  // Two phases: bins of the steps led by a heavy bin, step-major.
  std::vector<uint32_t> fixed_steps;
  // deal_bins()'s decisions in order, for replay_deal(): bin << 32 | merge << 31 | samples. Empty
  // when not logged (deal_contiguous, or a piece of 2^31 samples or more: then deal again).
  std::vector<uint64_t> log;
  bool logged = false;

  // Loads only (a writing pass), or with the per-bin statistics.
  BinCounts(uint64_t bins, bool stats) : load(bins, 0) {
    if (stats)
      samples.assign(bins, 0), mbs.assign(bins, 0), tokens.assign(bins, 0), images.assign(bins, 0);
  }
  BinCounts() = default;
  void add(uint32_t j, int64_t n, int64_t tokens_per_sample, bool image, bool new_mb) {
    samples[j] += uint32_t(n);
    tokens[j] += uint64_t(n) * uint64_t(tokens_per_sample);
    if (image) images[j] += uint32_t(n);
    if (new_mb) ++mbs[j];
  }
};

// Lays dealt bins out in `plan` in plan order (perm: position t * W + r to its bin): rank_begin
// appended, the ids (with room for spare_ids more) and micro-batches sized, and the writer's
// cursors per bin returned. pad_empty: an empty bin gets one micro-batch, for its caller to
// write a padded repeat into.
BinWriter lay_out_bins(Plan& plan, const BinCounts& c, const std::vector<uint32_t>& perm,
                       bool pad_empty, uint64_t spare_ids);
// Deals every sample of in.pool (buckets in in.order) longest first to the least-loaded of
// `bins` bins, with water filling for short samples and the two phases of
// DealInputs::coarse_threshold; with a writer, also writes the plan's ids and micro-batches.
// Both passes make identical decisions.
BinCounts deal_bins(uint64_t bins, const DealInputs& in, BinWriter* w);
// The writing pass of a logged deal_bins(): the same pieces, in the same order, without the heap
// (given pieces too: each bucket's from its first position in the pool on). Throws
// std::logic_error when the deal was not logged or its log does not match `in`.
void replay_deal(const BinCounts& c, const DealInputs& in, BinWriter& w);
// Cuts the pool, bucket by bucket, into consecutive runs of about equal load, one per bin.
BinCounts deal_contiguous(uint64_t bins, const DealInputs& in, BinWriter* w);

}  // namespace adaptiveload
