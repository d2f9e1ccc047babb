// The global batch every strategy keeps: --global-batch resolved on the pool into a kind
// (tokens or samples per step, or free) and a target per step.
#include <algorithm>

#include "adaptiveload/planner/planner.h"
#include "adaptiveload/util/format.h"

namespace adaptiveload {

void Planner::resolve_global_batch() {
  const BatchForm kind = opt_.batch;
  const double value = opt_.batch_value;
  const auto& buckets = bucketing_.buckets;
  const double n = double(pool_.size());
  if (kind == BatchForm::kFree) {
    base_.batch_kind = BatchKind::kFree, base_.batch_target = 0;
    global_batch_text_ = "free (each strategy's own)";
    return;
  }
  if (kind == BatchForm::kTokens) {
    base_.batch_kind = BatchKind::kTokens, base_.batch_target = value;
    global_batch_text_ = "tokens:" + fmt("%.0f", value);
    return;
  }
  if (kind == BatchForm::kSamples) {
    base_.batch_kind = BatchKind::kSamples, base_.batch_target = value;
    global_batch_text_ = "samples:" + fmt("%.0f", value);
    return;
  }
  double steps = value;
  if (kind == BatchForm::kAuto) {
    // The step count of a bucket loader with the same memory budget: equal_tokens' batches
    // (B = M_mem / S, capped at memory), W to a step.
    std::vector<uint64_t> per_bucket(buckets.size(), 0);
    for (uint32_t id : pool_) ++per_bucket[bucketing_.sample_bucket[id]];
    // With sequence parallelism: equal_tokens on groups of the largest g any sample needs.
    const int g = max_group();
    PlanProblem pr = base_;
    pr.world_size = cfg_.world_size;
    if (g > 1) pr = as_groups(pr, g, nullptr);
    const std::vector<int64_t> B = equal_tokens_batch_sizes(pr);
    uint64_t batches = 0;
    for (size_t b = 0; b < buckets.size(); ++b)
      batches += (per_bucket[b] + uint64_t(B[b]) - 1) / uint64_t(B[b]);
    const uint64_t W = uint64_t(pr.world_size);
    steps = double(std::max<uint64_t>(1, (batches + W - 1) / W));
  }
  // A step count is kept as tokens per step, as a bucket loader keeps them (its samples per
  // step swing between image and clip batches); an elastic resume keeps the rate.
  double tokens = 0;
  for (uint32_t id : pool_) tokens += double(buckets[bucketing_.sample_bucket[id]].tokens);
  base_.batch_kind = BatchKind::kTokens;
  base_.batch_target = tokens / steps;
  global_batch_text_ = "steps:" + fmt("%.0f", steps) +
                       (kind == BatchForm::kAuto ? " (auto: as equal_tokens)" : "") + ", " +
                       fmt("%.0f", base_.batch_target) + " tokens (" + fmt("%.1f", n / steps) +
                       " samples)/step";
}

std::string Planner::global_batch_text() const { return global_batch_text_; }

}  // namespace adaptiveload
