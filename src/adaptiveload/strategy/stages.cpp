#include "adaptiveload/strategy/stages.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace adaptiveload {

Ticks to_ticks(double seconds) {
  const double t = seconds * 1e9;
  // Compared before llround: a non-finite or huge time never reaches it.
  if (!(t < double(kMaxTicks))) return kMaxTicks;
  return std::max<Ticks>(1, std::llround(t));
}

Ticks group_ticks(const PlanProblem& pr, const MicroShape& s, int g) {
  return to_ticks(group_cost(*pr.cost, s, g, pr.layout.sp));
}

SampleTicks sample_ticks(const PlanProblem& pr, const Bucket& bk, int g) {
  const MicroShape one = MicroShape::uniform(1, bk);
  const Ticks per = to_ticks(group_work(*pr.cost, one, g, pr.layout.sp));
  return {per, std::max<Ticks>(0, group_ticks(pr, one, g) - per)};
}

void set_bucket_groups(PlanProblem& pr, const std::vector<uint8_t>& group) {
  if (std::any_of(group.begin(), group.end(), [](uint8_t g) { return g > 1; })) {
    pr.bucket_group = group;
  } else {
    pr.bucket_group.clear();
  }
}

std::vector<uint8_t> live_buckets(const std::vector<uint32_t>& ids,
                                  const std::vector<uint16_t>& sample_bucket, size_t buckets) {
  std::vector<uint8_t> live(buckets, 0);
  for (uint32_t id : ids) live[sample_bucket[id]] = 1;
  return live;
}

std::vector<uint8_t> live_buckets(const PlanProblem& pr) {
  return live_buckets(pr.pool_ids(), *pr.sample_bucket, pr.buckets->size());
}

GroupSpan group_span(const std::vector<uint8_t>& group, const std::vector<uint8_t>& live) {
  GroupSpan s{std::numeric_limits<int>::max(), 1};
  for (size_t b = 0; b < live.size(); ++b)
    if (live[b]) s.min = std::min(s.min, int(group[b])), s.max = std::max(s.max, int(group[b]));
  return s;
}

Rng problem_rng(const PlanProblem& pr, uint64_t purpose) {
  return Rng::for_segment(pr.seed, uint64_t(pr.epoch), pr.segment, purpose);
}

uint64_t batch_weight(const PlanProblem& pr, uint16_t bucket, uint64_t count) {
  return pr.batch_kind == BatchKind::kTokens ? uint64_t(pr.tokens(bucket)) * count : count;
}

std::vector<uint64_t> slot_keys(const PlanProblem& pr, const std::vector<SlotItem>& items,
                                uint64_t W) {
  const uint64_t slots = items.size() / W;
  std::vector<uint64_t> key(slots, 0);
  for (uint64_t s = 0; s < slots; ++s)
    for (uint64_t r = 0; r < W; ++r) {
      const SlotItem& it = items[s * W + r];
      key[s] += batch_weight(pr, it.bucket, it.count);
    }
  return key;
}

SlotItem padded_repeat(const BucketedPool& pool, size_t bucket) {
  return {pool.begin[bucket], 1, uint16_t(bucket), 1};
}

size_t cheapest_bucket(const BucketedPool& pool, const std::vector<Ticks>& cost) {
  return padding_bucket(
      pool, [](size_t) { return true; },
      [&](size_t a, size_t b) { return cost[a] != cost[b] ? cost[a] < cost[b] : a > b; });
}

size_t padding_bucket(const BucketedPool& pool, const std::function<bool(size_t b)>& allowed,
                      const std::function<bool(size_t a, size_t b)>& pads_before) {
  size_t best = SIZE_MAX;
  for (size_t b = 0; b + 1 < pool.begin.size(); ++b)
    if (pool.begin[b + 1] > pool.begin[b] && allowed(b) &&
        (best == SIZE_MAX || pads_before(b, best)))
      best = b;
  if (best == SIZE_MAX) throw std::logic_error("padding_bucket: no bucket with samples may pad");
  return best;
}

uint64_t split_to_multiple(uint64_t count, uint64_t W,
                           const std::function<uint64_t(uint64_t missing)>& split) {
  uint64_t missing = (W - count % W) % W;
  while (missing > 0) {
    const uint64_t added = split(missing);
    if (added == 0) break;
    if (added > missing)
      throw std::logic_error("split_to_multiple: split added more than was missing");
    missing -= added;
  }
  return missing;
}

uint64_t shrink_to_steps(uint64_t target, uint64_t have, int max_passes,
                         const std::function<std::optional<uint64_t>(uint64_t have)>& shrink) {
  for (int pass = 0; pass < max_passes && have < target; ++pass) {
    const std::optional<uint64_t> next = shrink(have);
    if (!next) break;
    have = *next;
  }
  return have;
}

}  // namespace adaptiveload
