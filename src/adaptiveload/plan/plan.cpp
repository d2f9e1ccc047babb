#include "adaptiveload/plan/plan.h"

#include <stdexcept>

namespace adaptiveload {

size_t StepBuilder::open(int rank, uint16_t bucket, bool padded) {
  auto& list = ranks_[size_t(rank)];
  list.push_back(Pending{bucket, padded, {}});
  return list.size() - 1;
}

void StepBuilder::commit(const std::vector<int64_t>& tokens_of_bucket) {
  StepInfo info;
  for (auto& list : ranks_) {
    for (auto& p : list) {
      if (p.ids.empty()) continue;
      if (plan_.sample_ids.size() + p.ids.size() > UINT32_MAX)
        throw std::length_error("plan holds more than 2^32 sample slots; plan fewer epochs or samples at once");
      MicroBatch mb;
      mb.begin = uint32_t(plan_.sample_ids.size());
      mb.count = uint32_t(p.ids.size());
      mb.bucket = p.bucket;
      mb.padded = p.padded ? 1 : 0;
      plan_.sample_ids.insert(plan_.sample_ids.end(), p.ids.begin(), p.ids.end());
      plan_.micro_batches.push_back(mb);
      info.samples += mb.count;
      info.tokens += uint64_t(tokens_of_bucket[p.bucket]) * mb.count;
      if (p.padded) {
        info.padded += mb.count;
        plan_.padded_samples += mb.count;
      }
    }
    plan_.rank_begin.push_back(plan_.micro_batches.size());
  }
  plan_.steps.push_back(info);
  clear();
}

void StepBuilder::clear() {
  for (auto& list : ranks_) list.clear();
}

}  // namespace adaptiveload
