// Cost and memory of a micro-batch by its shape (cost_model.h, shape.h).
#include "adaptiveload/cost/cost_model.h"

namespace adaptiveload {

double CostModel::cost(const MicroShape& s) const {
  if (s.empty()) return 0;
  if (s.is_uniform()) return microbatch_time(s.parts()[0].count, *s.parts()[0].bucket);
  const double w = work(s);
  return pack_seconds(overhead_s, w, half_efficiency_tokens, double(s.tokens()),
                      double(s.samples()), pack_sample_s);
}

double CostModel::work(const MicroShape& s) const {
  if (s.is_uniform()) return marginal_time(s.parts()[0].count, *s.parts()[0].bucket);
  double w = 0;
  for (const ShapePart& p : s.parts()) w += marginal_time(p.count, *p.bucket);
  return w;
}

double group_cost(const CostModel& c, const MicroShape& s, int g, const SeqParallel& sp) {
  if (g <= 1) return c.cost(s);
  if (s.empty()) return 0;
  if (s.is_uniform())
    return group_microbatch_time(c, s.parts()[0].count, *s.parts()[0].bucket, g, sp);
  const double w = group_work(c, s, g, sp);
  return pack_seconds(c.overhead_s + sp.a2a_latency_s, w, c.half_efficiency_tokens * double(g),
                      double(s.tokens()), double(s.samples()), c.pack_sample_s);
}

double group_work(const CostModel& c, const MicroShape& s, int g, const SeqParallel& sp) {
  if (s.is_uniform())
    return double(s.parts()[0].count) * group_sample_time(c, *s.parts()[0].bucket, g, sp);
  double w = 0;
  for (const ShapePart& p : s.parts())
    w += double(p.count) * group_sample_time(c, *p.bucket, g, sp);
  return w;
}

double MemoryModel::bytes(const MicroShape& s, int g) const {
  const int64_t G = g < 1 ? 1 : g;
  if (s.is_uniform()) return bytes(s.parts()[0].count, (s.parts()[0].bucket->tokens + G - 1) / G);
  double b = static_bytes;
  for (const ShapePart& p : s.parts())
    b += double(p.count) * (m0 + m1 * double((p.bucket->tokens + G - 1) / G));
  return b;
}

}  // namespace adaptiveload
