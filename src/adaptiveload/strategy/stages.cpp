#include "adaptiveload/strategy/stages.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace adaptiveload {

Ticks to_ticks(double seconds) {
  const double t = seconds * 1e9;
  // Compared before llround: a non-finite or huge time never reaches it.
  if (!(t < double(kMaxTicks))) return kMaxTicks;
  return std::max<Ticks>(1, std::llround(t));
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
  size_t best = SIZE_MAX;
  for (size_t b = 0; b + 1 < pool.begin.size(); ++b)
    if (pool.begin[b + 1] > pool.begin[b] && (best == SIZE_MAX || cost[b] <= cost[best])) best = b;
  if (best == SIZE_MAX) throw std::logic_error("cheapest_bucket: the pool is empty");
  return best;
}

}  // namespace adaptiveload
