#include "adaptiveload/strategy/plan_writer.h"

#include <stdexcept>

namespace adaptiveload {
namespace {

void check_slots(uint64_t n) {
  if (n > UINT32_MAX)
    throw std::length_error(
        "plan holds more than 2^32 sample slots; plan fewer epochs or samples at once");
}

}  // namespace

Plan empty_plan(const PlanProblem& pr, const char* name) {
  Plan plan;
  plan.strategy = name;
  plan.world_size = pr.world_size;
  plan.sync = pr.layout.sync;
  return plan;
}

int64_t PlanProblem::tokens(const Plan& plan, const MicroBatch& mb) const {
  if (mb.bucket != kPackedBucket) return int64_t(mb.count) * tokens(mb.bucket);
  int64_t n = 0;
  const uint32_t* ids = plan.ids(mb);
  for (uint32_t k = 0; k < mb.count; ++k) n += tokens((*sample_bucket)[ids[k]]);
  return n;
}

void total_steps(const PlanProblem& pr, Plan& plan) {
  const uint64_t W = uint64_t(plan.world_size);
  const uint64_t steps = (plan.rank_begin.size() - 1) / W;
  plan.steps.assign(steps, StepInfo{});
  plan.padded_samples = 0;
  for (uint64_t t = 0; t < steps; ++t)
    for (uint64_t r = 0; r < W; ++r)
      for (uint64_t m = plan.rank_begin[t * W + r]; m < plan.rank_begin[t * W + r + 1]; ++m) {
        if (r % uint64_t(plan.group(m)) != 0) continue;  // listed again on the group's other ranks
        const MicroBatch& mb = plan.micro_batches[m];
        add_to_step(plan.steps[t], mb.count, mb.padded ? 0 : uint64_t(pr.tokens(plan, mb)),
                    mb.padded);
        if (mb.padded) plan.padded_samples += mb.count;
      }
}

Plan drop_padded_only_step(const PlanProblem& pr, Plan plan, const char* name) {
  if (plan.padded_samples == 0 || pr.end_policy != EndPolicy::kDrop) return plan;
  Plan dropped = empty_plan(pr, name);
  dropped.packed = plan.packed;
  for (const MicroBatch& mb : plan.micro_batches)
    if (!mb.padded)
      dropped.dropped.insert(dropped.dropped.end(), plan.ids(mb), plan.ids(mb) + mb.count);
  return dropped;
}

PlanWriter::PlanWriter(const PlanProblem& pr, const char* name, bool with_groups)
    : pr_(pr), plan_(empty_plan(pr, name)), groups_(with_groups) {}

void PlanWriter::reserve(uint64_t samples, uint64_t micro_batches, uint64_t steps) {
  check_slots(samples);
  plan_.sample_ids.reserve(samples);
  plan_.micro_batches.reserve(micro_batches);
  if (groups_) plan_.mb_group.reserve(micro_batches);
  plan_.rank_begin.reserve(steps * uint64_t(plan_.world_size) + 1);
}

uint32_t PlanWriter::append_ids(const uint32_t* ids, uint64_t n) {
  const uint64_t at = plan_.sample_ids.size();
  check_slots(at + n);
  plan_.sample_ids.insert(plan_.sample_ids.end(), ids, ids + n);
  return uint32_t(at);
}

void PlanWriter::add(const MicroBatch& mb, uint8_t group) {
  plan_.micro_batches.push_back(mb);
  if (groups_) plan_.mb_group.push_back(group);
}

Plan PlanWriter::finish() {
  total_steps(pr_, plan_);
  return std::move(plan_);
}

}  // namespace adaptiveload
