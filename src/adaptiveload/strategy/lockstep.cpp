#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "adaptiveload/strategy/plan_writer.h"
#include "adaptiveload/strategy/stages.h"

namespace adaptiveload {

BucketedPool shuffled_by_bucket(const PlanProblem& pr) {
  const size_t nb = pr.buckets->size();
  BucketedPool out;
  out.begin.assign(nb + 1, 0);
  const std::vector<uint32_t>& ids = pr.pool_ids();
  for (uint32_t id : ids) ++out.begin[(*pr.sample_bucket)[id] + 1];
  for (size_t b = 0; b < nb; ++b) out.begin[b + 1] += out.begin[b];
  out.ids.resize(ids.size());
  std::vector<uint64_t> fill(out.begin.begin(), out.begin.end() - 1);
  for (uint32_t id : ids) out.ids[fill[(*pr.sample_bucket)[id]]++] = id;
  Rng rng = problem_rng(pr, kPurposeBucketShuffle);
  for (size_t b = 0; b < nb; ++b)
    rng.shuffle(out.ids.data() + out.begin[b], out.begin[b + 1] - out.begin[b]);
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

double PlanProblem::batch_total() const {
  if (batch_kind == BatchKind::kSamples) return double(pool_ids().size());
  double total = 0;
  for (uint32_t id : pool_ids()) total += double(tokens((*sample_bucket)[id]));
  return total;
}

uint64_t PlanProblem::target_steps() const {
  if (batch_kind == BatchKind::kFree || !(batch_target > 0)) return 0;
  const double k = std::round(batch_total() / batch_target);
  return k < 1 ? 1 : k > 4e9 ? uint64_t(4e9) : uint64_t(k);
}

SlotSteps steps_of_slots(const PlanProblem& pr, const std::vector<uint64_t>& key, uint64_t steps,
                         uint64_t purpose, bool last_at_end) {
  const uint64_t total = key.size();
  // A padded last slot stays in the epoch's last step: padding is the end-of-epoch policy.
  const uint64_t n = last_at_end && total > 0 ? total - 1 : total;
  SlotSteps out;
  if (steps == 0 || steps >= n) {
    // One slot per step, in the given order (shuffled when the global batch is set).
    out.order.resize(n);
    out.step_begin.resize(n + 1);
    for (uint64_t i = 0; i < n; ++i) out.order[i] = uint32_t(i), out.step_begin[i] = i;
    out.step_begin[n] = n;
    if (steps != 0 && n > 1) {
      Rng rng = problem_rng(pr, purpose);
      rng.shuffle(out.order);
    }
  } else {
    std::vector<uint32_t> sorted(n);
    for (uint64_t i = 0; i < n; ++i) sorted[i] = uint32_t(i);
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](uint32_t a, uint32_t b) { return key[a] > key[b]; });
    // Snake over the steps: step of the i-th largest slot.
    std::vector<uint32_t> step_of(n);
    std::vector<uint64_t> count(steps + 1, 0);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t t = snake_step(i, steps);
      step_of[sorted[i]] = uint32_t(t);
      ++count[t + 1];
    }
    Rng rng = problem_rng(pr, purpose);
    std::vector<uint32_t> step_perm(steps);  // position of each step in the epoch
    for (uint64_t t = 0; t < steps; ++t) step_perm[t] = uint32_t(t);
    rng.shuffle(step_perm);
    std::vector<uint64_t> pos_count(steps + 1, 0);
    for (uint64_t t = 0; t < steps; ++t) pos_count[step_perm[t] + 1] = count[t + 1];
    out.step_begin.assign(steps + 1, 0);
    for (uint64_t t = 0; t < steps; ++t)
      out.step_begin[t + 1] = out.step_begin[t] + pos_count[t + 1];
    std::vector<uint64_t> fill(out.step_begin.begin(), out.step_begin.end() - 1);
    out.order.resize(n);
    for (uint32_t s : sorted) out.order[fill[step_perm[step_of[s]]]++] = s;
  }
  if (n < total) {
    out.order.push_back(uint32_t(n));
    const uint64_t have = out.step_begin.size() - 1;
    if (have > 0 && steps != 0 && have >= steps) {
      out.step_begin.back() += 1;  // joins the last step
    } else {
      out.step_begin.push_back(out.step_begin.back() + 1);  // a step of its own
    }
  }
  return out;
}

Plan plan_from_slots(const PlanProblem& pr, const char* name, const std::vector<uint32_t>& ids,
                     const std::vector<SlotItem>& items, const SlotSteps& steps) {
  const uint64_t W = uint64_t(pr.world_size);
  const uint64_t n_steps = steps.step_begin.size() - 1;
  uint64_t total = 0;
  for (const SlotItem& it : items) total += it.count;
  PlanWriter out(pr, name, false);
  out.reserve(total, items.size(), n_steps);
  for (uint64_t t = 0; t < n_steps; ++t)
    for (uint64_t r = 0; r < W; ++r) {
      for (uint64_t k = steps.step_begin[t]; k < steps.step_begin[t + 1]; ++k) {
        const SlotItem& it = items[uint64_t(steps.order[k]) * W + r];
        if (it.count == 0) continue;
        MicroBatch mb;
        mb.begin = out.append_ids(ids.data() + it.begin, it.count);
        mb.count = it.count;
        mb.bucket = it.bucket;
        mb.padded = it.padded;
        out.add(mb);
      }
      out.next_rank();
    }
  return out.finish();
}

Plan plan_lockstep(const PlanProblem& pr, const std::vector<int64_t>& batch_of_bucket,
                   const char* name) {
  const int W = pr.world_size;
  BucketedPool pool = shuffled_by_bucket(pr);
  // A global batch smaller than W of these batches per step: smaller batches (as a bucket
  // loader with that global batch would use), so the epoch has the target's step count.
  std::vector<int64_t> size(batch_of_bucket);
  const uint64_t target = pr.target_steps();
  bool shrinkable = false;
  auto slots_of = [&] {  // slots of W batches at the current sizes
    uint64_t n_batches = 0;
    shrinkable = false;
    for (size_t b = 0; b < size.size(); ++b) {
      const uint64_t n = pool.begin[b + 1] - pool.begin[b],
                     B = uint64_t(std::max<int64_t>(size[b], 1));
      n_batches += (n + B - 1) / B;
      shrinkable = shrinkable || (n > 1 && B > 1);
    }
    return (n_batches + uint64_t(W) - 1) / uint64_t(W);
  };
  shrink_to_steps(target, slots_of(), 64, [&](uint64_t slots) -> std::optional<uint64_t> {
    if (!shrinkable) return std::nullopt;
    // At least 5% smaller each pass: the partial last batch of each bucket makes the count
    // grow slower than 1 / B.
    const double f = std::min(0.95, double(slots) / double(target));
    for (int64_t& B : size)
      B = std::max<int64_t>(1, std::min<int64_t>(B - 1, int64_t(std::floor(double(B) * f))));
    return slots_of();
  });
  std::vector<SlotItem> batches;
  for (size_t b = 0; b < pr.buckets->size(); ++b) {
    const uint64_t B = uint64_t(std::max<int64_t>(size[b], 1));
    for (uint64_t i = pool.begin[b]; i < pool.begin[b + 1]; i += B)
      batches.push_back({i, uint32_t(std::min(B, pool.begin[b + 1] - i)), uint16_t(b), 0});
  }
  Rng rng = problem_rng(pr, kPurposeBatchOrder);
  rng.shuffle(batches);

  std::vector<uint32_t> dropped;
  const size_t full = batches.size() / size_t(W), rem = batches.size() % size_t(W);
  if (rem > 0) {
    if (pr.end_policy == EndPolicy::kPad) {
      // Complete the last slot with repeats of the epoch's first batches, flagged.
      const size_t n = batches.size();
      for (size_t r = rem; r < size_t(W); ++r) {
        SlotItem it = batches[(r - rem) % n];
        it.padded = 1;
        batches.push_back(it);
      }
    } else {
      for (size_t i = full * size_t(W); i < batches.size(); ++i)
        for (uint32_t k = 0; k < batches[i].count; ++k)
          dropped.push_back(pool.ids[batches[i].begin + k]);
      batches.resize(full * size_t(W));
    }
  }
  const bool padded_last = rem > 0 && pr.end_policy == EndPolicy::kPad;
  const SlotSteps steps = steps_of_slots(pr, slot_keys(pr, batches, uint64_t(W)), target,
                                         kPurposeStepOrder, padded_last);
  Plan plan = plan_from_slots(pr, name, pool.ids, batches, steps);
  plan.dropped = std::move(dropped);
  return plan;
}

}  // namespace adaptiveload
