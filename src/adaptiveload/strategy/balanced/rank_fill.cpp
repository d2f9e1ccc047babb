// rank_dealing::Dealer::fill (rank_dealer.h): step sync, the whole epoch dealt against each
// step's share of the time.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "adaptiveload/strategy/balanced/rank_dealer.h"

namespace adaptiveload {
namespace rank_dealing {

namespace {

// `share` of the steps [t0, t1), evenly spaced, lengthened to `lump` seconds (the longest
// sample's on the slowest ranks) so that a slowest rank can take one, the window's other steps
// shortened by as much in all (bounds and token room scaled alike, the window's time kept).
// False where nothing is lengthened.
bool lengthen(std::vector<double>& bound, std::vector<double>& room, size_t t0, size_t t1,
              double lump, double share) {
  const size_t len = t1 - t0, n = size_t(std::lround(share * double(len)));
  if (n == 0 || n >= len) return false;
  std::vector<char> is_long(len, 0);
  for (size_t i = 0; i < n; ++i) is_long[(i * len) / n + len / (2 * n)] = 1;
  double longer = 0, rest = 0;
  for (size_t i = 0; i < len; ++i)
    if (bound[t0 + i] <= 0) {
      return false;  // a step of no work planned: nothing to scale
    } else if (is_long[i]) {
      longer += std::max(0.0, lump - bound[t0 + i]);
    } else {
      rest += bound[t0 + i];
    }
  if (longer <= 0 || rest <= longer) return false;
  const double f = (rest - longer) / rest;
  for (size_t i = 0; i < len; ++i) {
    const size_t t = t0 + i;
    const double g = is_long[i] ? std::max(lump, bound[t]) / bound[t] : f;
    bound[t] *= g, room[t] *= g;
  }
  return true;
}

}  // namespace

double Dealer::lumped_share(const std::vector<Sample>& samples, double mean_bound,
                            size_t steps) const {
  // The slowest ranks: their speed and how many.
  double slow = 1e300;
  size_t slow_ranks = 0;
  for (size_t r = 0; r < size_t(plan_.world_size); ++r) slow = std::min(slow, pr_.layout.speed(r));
  for (size_t r = 0; r < size_t(plan_.world_size); ++r) slow_ranks += pr_.layout.speed(r) == slow;
  double work = 0, small = 0, lumps = 0;
  size_t n = 0;
  for (const Sample& x : samples) {
    work += x.per;
    if (x.per / slow > mean_bound) {
      lumps += x.per, ++n;
    } else {
      small += x.per;
    }
  }
  const double need = work * slow * double(slow_ranks) / speeds_ - small;
  if (n == 0 || need <= 0) return 0;
  return need / (double(slow_ranks) * lumps / double(n)) / double(steps);
}

std::vector<std::vector<Mb>> Dealer::fill(double lumped) const {
  const size_t W = size_t(plan_.world_size), K = plan_.num_steps();
  std::vector<std::vector<Mb>> out(K * W);
  std::vector<double> load(K * W, 0.0), bound(K, 0.0), tokens(K, 0.0), room(K, 0.0);
  std::vector<std::vector<Sample>> of_step(K);
  for (size_t j = 0; j < K * W; ++j)
    for (uint64_t m = plan_.rank_begin[j]; m < plan_.rank_begin[j + 1]; ++m) {
      const MicroBatch& mb = plan_.micro_batches[m];
      Mb copy = copy_of(m);
      bound[j / W] += copy.cost;  // the step's work as planned
      // Its trained tokens (padded repeats, which stay, count for none, as in step_figures).
      if (!mb.padded) room[j / W] += double(copy.tokens) * (1 + kMaxBatchDev);
      if (mb.padded) {
        load[j] += copy.cost;
        out[j].push_back(std::move(copy));
      } else {
        for (uint32_t k = 0; k < mb.count; ++k) of_step[j / W].push_back(sample(plan_.ids(mb)[k]));
      }
    }
  for (size_t t = 0; t < K; ++t) {
    bound[t] /= speeds_;  // the step's share: its work over the ranks' speeds
    for (size_t r = 0; r < W; ++r)
      bound[t] = std::max(bound[t], load[t * W + r] / pr_.layout.speed(r));
  }
  // Per step and speed class, the rank-step of least time (the one with most room).
  std::vector<double> classes;
  std::vector<size_t> cls(W);
  for (size_t r = 0; r < W; ++r) {
    const double v = pr_.layout.speed(r);
    auto it = std::find(classes.begin(), classes.end(), v);
    cls[r] = size_t(it - classes.begin());
    if (it == classes.end()) classes.push_back(v);
  }
  const size_t C = classes.size();
  std::vector<size_t> least(K * C, SIZE_MAX);
  auto refresh = [&](size_t t, size_t c) {
    size_t& best = least[t * C + c];
    best = SIZE_MAX;
    for (size_t r = 0; r < W; ++r)
      if (cls[r] == c && (best == SIZE_MAX || load[t * W + r] < load[t * W + best])) best = r;
  };
  for (size_t t = 0; t < K; ++t)
    for (size_t c = 0; c < C; ++c) refresh(t, c);
  // Each sample (longest first) where it ends within its step's bound with the least room left;
  // else where the bound grows least. Within windows of kFillWindow steps, each window's samples
  // among its steps: over all K steps a sample would cost K x classes trials.
  const double slowest = *std::min_element(classes.begin(), classes.end());
  std::vector<std::vector<Sample>> windows;
  bool lengthened = false;
  for (size_t t0 = 0; t0 < K; t0 += kFillWindow) {
    const size_t t1 = std::min(K, t0 + kFillWindow);
    std::vector<Sample>& samples = windows.emplace_back();
    for (size_t t = t0; t < t1; ++t)
      samples.insert(samples.end(), of_step[t].begin(), of_step[t].end());
    sort_longest_first(samples);
    if (lumped > 0 && !samples.empty()) {
      double mean_bound = 0;
      for (size_t t = t0; t < t1; ++t) mean_bound += bound[t] / double(t1 - t0);
      const double share = lumped * lumped_share(samples, mean_bound, t1 - t0);
      lengthened |= lengthen(bound, room, t0, t1, samples.front().per / slowest, share);
    }
  }
  if (lumped > 0 && !lengthened) return {};
  for (size_t t0 = 0; t0 < K; t0 += kFillWindow) {
    const size_t t1 = std::min(K, t0 + kFillWindow);
    const std::vector<Sample>& samples = windows[t0 / kFillWindow];
    for (const Sample& s : samples) {
      size_t best = SIZE_MAX;
      bool merge = false;
      int level = 3;
      double key = 0, end = 0;
      const double alone = added(0, nullptr, s), tk_s = double((*pr_.buckets)[s.bucket].tokens);
      for (size_t t = t0; t < t1; ++t)
        for (size_t c = 0; c < C; ++c) {
          const size_t r = least[t * C + c], j = t * W + r;
          const bool over = tokens[t] + tk_s > room[t];
          // Joining a micro-batch costs no more than one alone: where even that end leaves more
          // room than the best so far (or the tokens do not fit beside one that does), no better.
          if (level == 0 && (over || bound[t] - (load[j] + alone) / classes[c] >= key)) continue;
          const Mb* open = out[j].empty() || out[j].back().padded ? nullptr : &out[j].back();
          // Unpacked, only a micro-batch of the sample's bucket can take it.
          double x = open && (pr_.packing || open->bucket == s.bucket) ? added(r, open, s) : -1;
          const bool m = x >= 0;
          if (!m) x = alone;
          const double f = (load[j] + x) / classes[c];
          // Tier 0: within the bound and the step's tokens; 1: within its tokens; 2: neither.
          const int tier = over ? 2 : f <= bound[t] ? 0 : 1;
          const double k = tier == 0 ? bound[t] - f : std::max(0.0, f - bound[t]);
          if (best == SIZE_MAX || tier < level || (tier == level && k < key))
            best = j, level = tier, merge = m, key = k, end = f;
        }
      if (!merge) out[best].emplace_back();
      const double before = out[best].back().cost;
      put(out[best].back(), s);
      load[best] += out[best].back().cost - before;
      tokens[best / W] += tk_s;
      bound[best / W] = std::max(bound[best / W], end);
      refresh(best / W, cls[best % W]);
    }
  }
  return out;
}

}  // namespace rank_dealing
}  // namespace adaptiveload
