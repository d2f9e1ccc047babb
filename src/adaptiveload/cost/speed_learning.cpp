#include "adaptiveload/cost/speed_learning.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

bool usable(double v) { return std::isfinite(v) && v > 0; }

// Median of v (sorted in place); the mean of the two middle values for an even count.
double median(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Per rank, its ratios relative to its step's lower median rank, over the window's steps in
// which at least two ranks worked.
std::vector<std::vector<double>> relative_ratios(const std::vector<std::vector<double>>& window,
                                                 size_t W) {
  std::vector<std::vector<double>> rel(W);
  std::vector<double> row;
  for (size_t t = 0; t < window.size(); ++t) {
    if (window[t].size() != W)
      throw InputError("rank speed window",
                       "step " + std::to_string(t) + " holds " + std::to_string(window[t].size()) +
                           " ratios, not one per rank (" + std::to_string(W) + ")");
    row.clear();
    for (double v : window[t])
      if (usable(v)) row.push_back(v);
    if (row.size() < 2) continue;
    std::sort(row.begin(), row.end());
    const double ref = row[(row.size() - 1) / 2];  // the lower median: a typical rank
    for (size_t r = 0; r < W; ++r)
      if (usable(window[t][r])) rel[r].push_back(window[t][r] / ref);
  }
  return rel;
}

}  // namespace

std::vector<double> learn_rank_speeds(const std::vector<std::vector<double>>& window,
                                      const std::vector<double>& current,
                                      const SpeedLearning& params) {
  const size_t W = current.size();
  for (double f : current)
    if (!usable(f)) throw InputError("rank speed factors", "must be finite and > 0");
  std::vector<std::vector<double>> rel = relative_ratios(window, W);
  std::vector<double> out = current;
  for (size_t r = 0; r < W; ++r) {
    if (rel[r].size() < std::max<size_t>(params.min_steps, 1)) continue;
    const double m = median(rel[r]);
    // A rank whose ratios scatter (a loaded host) needs a change beyond their scatter: the
    // median absolute deviation over the median, 0 for a steady straggler or a lone spike.
    std::vector<double> dev;
    for (double x : rel[r]) dev.push_back(std::fabs(x - m));
    const double tol = std::max(params.tolerance, median(dev) / m);
    double c = std::clamp(1.0 / m, params.lowest, params.highest);
    c = std::round(c * 100.0) / 100.0;
    if (std::fabs(c / current[r] - 1.0) <= tol) continue;  // hysteresis
    out[r] = std::fabs(c - 1.0) <= tol ? 1.0 : c;
  }
  return out;
}

}  // namespace adaptiveload
