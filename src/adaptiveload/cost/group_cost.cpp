// Sequence-parallel groups in the cost model (cost_model.h; docs/planner.md).
#include "adaptiveload/cost/cost_model.h"

namespace adaptiveload {

double group_sample_time(const CostModel& c, const Bucket& b, int g, const SeqParallel& sp) {
  if (g <= 1) return c.sample_time(b);
  const double S = double(b.tokens), G = double(g);
  return c.sample_time(b) / G + sp.a2a_s_per_token * S * (G - 1) / (G * G);
}

double group_microbatch_time(const CostModel& c, int64_t batch, const Bucket& b, int g,
                             const SeqParallel& sp) {
  if (g <= 1) return c.microbatch_time(batch, b);
  if (batch <= 0) return 0;
  const double G = double(g);
  return c.overhead_s + sp.a2a_latency_s +
         group_sample_time(c, b, g, sp) *
             (double(batch) + c.half_efficiency_tokens * G / double(b.tokens));
}

GroupCost::GroupCost(const CostModel& base, int g, const SeqParallel& sp)
    : base_(base), g_(g), sp_(sp) {
  overhead_s = base.overhead_s + (g > 1 ? sp.a2a_latency_s : 0.0);
  half_efficiency_tokens = base.half_efficiency_tokens * double(g);
  pack_sample_s = base.pack_sample_s;
}

double GroupCost::sample_time(const Bucket& b) const {
  return group_sample_time(base_, b, g_, sp_);
}

}  // namespace adaptiveload
