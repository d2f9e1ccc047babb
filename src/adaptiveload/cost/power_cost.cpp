#include <cmath>

#include "adaptiveload/cost/cost_variants.h"

namespace adaptiveload {

double PowerCost::sample_time(const Bucket& b) const { return k_ * std::pow(double(b.tokens), p_); }

PowerFit fit_power(const CostModel& reference, const std::vector<Bucket>& buckets,
                   const std::vector<int64_t>& bucket_counts) {
  // Weighted linear regression of log t on log S.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    double w = i < bucket_counts.size() ? double(bucket_counts[i]) : 1.0;
    if (w <= 0) continue;
    double x = std::log(double(buckets[i].tokens)), y = std::log(reference.sample_time(buckets[i]));
    sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  PowerFit fit;
  if (sw <= 0) return fit;
  double var = sxx / sw - (sx / sw) * (sx / sw);
  fit.p = var > 1e-12 ? (sxy / sw - (sx / sw) * (sy / sw)) / var : 1.0;
  fit.k = std::exp((sy - fit.p * sx) / sw);
  return fit;
}

}  // namespace adaptiveload
