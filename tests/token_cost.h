#pragma once
// A cost model for hand-made strategy problems: one nanosecond per token, and a fixed
// overhead per micro-batch (0 unless given). Shared by the tests of the strategies' stages.
#include <string>

#include "adaptiveload/cost/cost_model.h"

namespace adaptiveload::test {

class TokenCost : public CostModel {
 public:
  explicit TokenCost(double overhead = 0) { overhead_s = overhead; }
  std::string name() const override { return "tokens"; }
  double sample_time(const Bucket& b) const override { return double(b.tokens) * 1e-9; }
};

}  // namespace adaptiveload::test
