#include <algorithm>
#include <cmath>

#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/rng.h"

namespace adaptiveload {

BucketedPool shuffled_by_bucket(const PlanProblem& pr) {
  const size_t nb = pr.buckets->size();
  BucketedPool out;
  out.begin.assign(nb + 1, 0);
  for (uint32_t id : pr.pool) ++out.begin[(*pr.sample_bucket)[id] + 1];
  for (size_t b = 0; b < nb; ++b) out.begin[b + 1] += out.begin[b];
  out.ids.resize(pr.pool.size());
  std::vector<uint64_t> fill(out.begin.begin(), out.begin.end() - 1);
  for (uint32_t id : pr.pool) out.ids[fill[(*pr.sample_bucket)[id]]++] = id;
  Rng rng = Rng::for_purpose(pr.seed, uint64_t(pr.epoch), kPurposeBucketShuffle | (pr.segment << 8));
  for (size_t b = 0; b < nb; ++b) rng.shuffle(out.ids.data() + out.begin[b], out.begin[b + 1] - out.begin[b]);
  return out;
}

std::vector<int64_t> dual_batch_sizes(const PlanProblem& pr) {
  std::vector<int64_t> out(pr.buckets->size());
  for (size_t b = 0; b < out.size(); ++b) {
    const double S = double((*pr.buckets)[b].tokens);
    int64_t B = pr.max_batch_memory[b];
    if (pr.mem_budget_tokens > 0) B = std::min<int64_t>(B, pr.mem_budget_tokens / int64_t(S));
    if (pr.comp_budget > 0) {
      // In double first: a large M_comp over a small S^p exceeds int64.
      const double bc = std::floor(pr.comp_budget / std::pow(S, pr.p));
      if (bc < double(B)) B = int64_t(bc);
    }
    out[b] = std::max<int64_t>(B, 1);
  }
  return out;
}

Plan plan_lockstep(const PlanProblem& pr, const std::vector<int64_t>& batch_of_bucket, const char* name) {
  const int W = pr.world_size;
  Plan plan;
  plan.strategy = name;
  plan.world_size = W;
  BucketedPool pool = shuffled_by_bucket(pr);
  struct Batch {
    uint64_t begin;
    uint32_t count;
    uint16_t bucket;
  };
  std::vector<Batch> batches;
  for (size_t b = 0; b < pr.buckets->size(); ++b) {
    const uint64_t B = uint64_t(std::max<int64_t>(batch_of_bucket[b], 1));
    for (uint64_t i = pool.begin[b]; i < pool.begin[b + 1]; i += B)
      batches.push_back({i, uint32_t(std::min(B, pool.begin[b + 1] - i)), uint16_t(b)});
  }
  Rng rng = Rng::for_purpose(pr.seed, uint64_t(pr.epoch), kPurposeBatchOrder | (pr.segment << 8));
  rng.shuffle(batches);

  std::vector<int64_t> tokens(pr.buckets->size());
  for (size_t b = 0; b < tokens.size(); ++b) tokens[b] = (*pr.buckets)[b].tokens;
  StepBuilder step(plan);
  auto put = [&](int rank, const Batch& bt, bool padded) {
    size_t mb = step.open(rank, bt.bucket, padded);
    for (uint32_t k = 0; k < bt.count; ++k) step.add(rank, mb, pool.ids[bt.begin + k]);
  };
  const size_t full = batches.size() / size_t(W), rem = batches.size() % size_t(W);
  for (size_t t = 0; t < full; ++t) {
    for (int r = 0; r < W; ++r) put(r, batches[t * size_t(W) + size_t(r)], false);
    step.commit(tokens);
  }
  if (rem > 0) {
    if (pr.end_policy == EndPolicy::kPad) {
      for (size_t r = 0; r < size_t(W); ++r) {
        if (r < rem) {
          put(int(r), batches[full * size_t(W) + r], false);
        } else {
          put(int(r), batches[(r - rem) % batches.size()], true);
        }
      }
      step.commit(tokens);
    } else {
      for (size_t i = full * size_t(W); i < batches.size(); ++i)
        for (uint32_t k = 0; k < batches[i].count; ++k) plan.dropped.push_back(pool.ids[batches[i].begin + k]);
    }
  }
  return plan;
}

}  // namespace adaptiveload
