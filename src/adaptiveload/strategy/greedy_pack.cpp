// The greedy_pack strategy (packing.h): greedy_packs of the global batch's tokens per
// rank-step, dealt in rounds of W packs to the K steps.
#include <algorithm>
#include <cmath>

#include "adaptiveload/strategy/packing.h"
#include "adaptiveload/strategy/plan_writer.h"

namespace adaptiveload {

Plan plan_greedy_pack(const PlanProblem& pr) {
  const uint64_t W = uint64_t(pr.world_size);
  Plan plan = empty_plan(pr, "greedy_pack");
  plan.packed = true;
  const PackRoom room = PackRoom::of(pr);
  // With a global batch of K steps, packs of the step's tokens over the ranks (one pack a
  // rank-step, more where they do not fit the memory budget); free: packs of the budget.
  const uint64_t K = pr.target_steps();
  int64_t target = 0;
  if (K > 0) {
    double total = 0;
    for (uint32_t id : pr.pool_ids()) total += double(pr.tokens((*pr.sample_bucket)[id]));
    target = int64_t(std::max(1.0, std::floor(total / double(K * W))));
  }
  const Packs packs = greedy_packs(pr, room, target);
  uint64_t np = packs.size();
  if (np == 0) return plan;
  if (np % W != 0 && pr.end_policy == EndPolicy::kDrop) {
    // The last packs cannot give every rank one: their samples are dropped.
    const uint64_t keep = np - np % W;
    for (uint64_t k = keep; k < np; ++k)
      plan.dropped.insert(plan.dropped.end(), packs.ids.begin() + int64_t(packs.begin[k]),
                          packs.ids.begin() + int64_t(packs.begin[k + 1]));
    np = keep;
    if (np == 0) return plan;
  }
  // Rounds of W packs (one a rank), the last completed by padded repeats; the K steps take
  // `base` or base + 1 rounds each (every rank of a step the same count), fewer steps when
  // there are fewer rounds.
  const uint64_t rounds = (np + W - 1) / W;
  const uint64_t steps = K > 0 ? std::min(K, rounds) : rounds;
  const uint64_t base = rounds / steps, extra = rounds % steps;
  plan.sample_ids.assign(packs.ids.begin(), packs.ids.begin() + int64_t(packs.begin[np]));
  // The padding sample: the cheapest of the pool, the first of it in the shuffled order.
  const std::vector<Ticks> per = per_sample_ticks(pr);
  uint32_t pad_id = packs.ids[0];
  for (uint32_t id : packs.ids)
    if (per[(*pr.sample_bucket)[id]] < per[(*pr.sample_bucket)[pad_id]]) pad_id = id;
  uint64_t round = 0;
  for (uint64_t t = 0; t < steps; ++t) {
    const uint64_t a = base + (t < extra ? 1 : 0);
    // Rank r of step t runs pack (round + i) * W + r for its a rounds i.
    for (uint64_t r = 0; r < W; ++r) {
      for (uint64_t i = 0; i < a; ++i) {
        const uint64_t k = (round + i) * W + r;
        MicroBatch mb;
        if (k < np) {
          mb.begin = uint32_t(packs.begin[k]),
          mb.count = uint32_t(packs.begin[k + 1] - packs.begin[k]);
          mb.bucket = pack_bucket(pr, plan.sample_ids.data() + mb.begin, mb.count);
        } else {
          mb.begin = uint32_t(plan.sample_ids.size()), mb.count = 1, mb.padded = 1;
          mb.bucket = (*pr.sample_bucket)[pad_id];
          plan.sample_ids.push_back(pad_id);
        }
        plan.micro_batches.push_back(mb);
      }
      plan.rank_begin.push_back(plan.micro_batches.size());
    }
    round += a;
  }
  total_steps(pr, plan);
  return plan;
}

}  // namespace adaptiveload
