// rank_caps (rank_speeds.h): per rank, its micro-batch caps grown with its memory (and, with
// --mem-budget auto, its device's speed).
#include <algorithm>
#include <cmath>

#include "adaptiveload/strategy/balanced/rank_speeds.h"

namespace adaptiveload {

RankCaps rank_caps(const PlanProblem& pr) {
  const size_t W = size_t(pr.world_size), nb = pr.buckets->size();
  const std::vector<int64_t> dual = dual_batch_sizes(pr);
  RankCaps c;
  c.batch.assign(W, std::vector<int64_t>(nb, 0));
  const double room = pr.usable_bytes - pr.memory.static_bytes;
  // Each rank's device's speed (a straggler's factor, stated or learned, grows nothing).
  auto device_speed = [&](size_t r) {
    return pr.layout.device_speed.empty() ? 1.0 : pr.layout.device_speed[r];
  };
  double slowest = 1e300;
  for (size_t r = 0; r < W; ++r) slowest = std::min(slowest, device_speed(r));
  for (size_t r = 0; r < W; ++r) {
    const double usable = pr.rank_usable_bytes.empty() ? pr.usable_bytes : pr.rank_usable_bytes[r];
    // The rank's room for activations over the reference device's: what its budgets grow by.
    const double grow = room > 0 ? std::max(1.0, (usable - pr.memory.static_bytes) / room) : 1.0;
    c.usable.push_back(usable);
    // And with its device's speed over the slowest device's where M_mem is the memory's own
    // (auto: the reference device's tightest bucket) and the plan's layout release has it:
    // a device s times as fast holds s times the slowest's micro-batch in the same time, where
    // its memory fits it, rounded up where within a quarter of a sample (an H100 at 2.85x an
    // A100 holds 3 where the A100 holds 1), whichever device the ranks list first. A stated
    // M_mem is a budget the rank keeps.
    const double speed = pr.mem_budget_auto && pr.lumped_layouts() ? device_speed(r) / slowest : 0;
    // A pack's tokens grow with the memory only: packs grown with the speed held the long clips
    // of Taichi-HD + COCO on 8 A100 + 8 H100 to fewer slots, 78.7% of ideal -> 61.1% (measured
    // before the lumped slots of Dealer::form_slots).
    c.pack_tokens.push_back(std::floor(double(pr.mem_budget_tokens) * grow));
    for (size_t b = 0; b < nb; ++b) {
      const int64_t fits = pr.memory.max_batch((*pr.buckets)[b].tokens, usable);
      double wanted = std::floor(double(dual[b]) * grow);
      if (speed > grow) wanted = std::max(wanted, std::floor(double(dual[b]) * speed + 0.25));
      c.batch[r][b] =
          std::min<int64_t>(fits, std::max<int64_t>(dual[b], int64_t(std::min(wanted, 1e15))));
    }
  }
  return c;
}

}  // namespace adaptiveload
