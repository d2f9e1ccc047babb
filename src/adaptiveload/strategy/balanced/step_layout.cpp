#include "adaptiveload/strategy/balanced/step_layout.h"

#include <algorithm>
#include <cmath>

#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload {

// Epoch ticks of a dealing once bins are laid out as steps by `perm`.
int64_t epoch_ticks(const BinCounts& c, const std::vector<uint32_t>& perm, int W,
                    int64_t allreduce) {
  int64_t total = 0;
  for (size_t t = 0; t < perm.size() / size_t(W); ++t) {
    int64_t mx = 0;
    for (int r = 0; r < W; ++r) mx = std::max(mx, c.load[perm[t * size_t(W) + size_t(r)]]);
    total += mx + allreduce;
  }
  return total;
}

std::vector<uint32_t> shuffled_bins(uint64_t bins, Rng rng) {
  std::vector<uint32_t> perm(bins);
  for (uint64_t j = 0; j < bins; ++j) perm[j] = uint32_t(j);
  rng.shuffle(perm);
  return perm;
}

// Bins laid out step-major, W to a step, with the step order and the ranks in each step
// shuffled.
std::vector<uint32_t> shuffled_steps(const std::vector<uint32_t>& laid, int W, Rng rng) {
  const uint64_t w = uint64_t(W), K = laid.size() / w;
  std::vector<uint32_t> step_perm(K);
  for (uint64_t t = 0; t < K; ++t) step_perm[t] = uint32_t(t);
  rng.shuffle(step_perm);
  std::vector<uint32_t> out(laid.size());
  for (uint64_t t = 0; t < K; ++t) {
    std::copy(laid.begin() + int64_t(step_perm[t] * w),
              laid.begin() + int64_t((step_perm[t] + 1) * w), out.begin() + int64_t(t * w));
    rng.shuffle(out.data() + t * w, w);
  }
  return out;
}

namespace {

// A step's batch x against the steps' mean, |x - mean| / mean: one formula for step_spread and
// level_steps, so that a layout level_steps keeps within kMaxBatchDev step_spread finds within
// it too (batches are integers summed exactly in doubles below 2^53).
double batch_dev_of(double x, double mean) { return std::abs(x - mean) / mean; }

// A step's batch: the tokens (or samples) of its w bins from `step`.
uint64_t step_batch(const BinCounts& c, const uint32_t* step, uint64_t w, bool by_tokens) {
  uint64_t x = 0;
  for (uint64_t r = 0; r < w; ++r)
    x += by_tokens ? c.tokens[step[r]] : uint64_t(c.samples[step[r]]);
  return x;
}

// The mix every step of a layout of K steps is to hold: an image where its bins hold one for
// every step, and a clip likewise.
struct MixWanted {
  bool image, clip;
};
MixWanted mix_wanted(const BinCounts& c, const std::vector<uint32_t>& perm, uint64_t K) {
  uint64_t images = 0, samples = 0;
  for (uint32_t j : perm) images += c.images[j], samples += c.samples[j];
  return {images >= K, samples - images >= K};
}

// Whether a step of w bins from `step` lacks the wanted mix.
bool step_unmixed(const BinCounts& c, const uint32_t* step, uint64_t w, MixWanted want) {
  uint64_t im = 0, n = 0;
  for (uint64_t r = 0; r < w; ++r) im += c.images[step[r]], n += c.samples[step[r]];
  return (want.image && im == 0) || (want.clip && im == n);
}

}  // namespace

// How far a layout is from the global batch and from a like mix in every step:
// `batch_dev` the largest |x_t - mean| / mean of the steps' tokens (or samples), `unmixed`
// the share of steps without an image while the pool has one for every step, or without a
// clip while it has one for every step.
StepSpread step_spread(const BinCounts& c, const std::vector<uint32_t>& perm, int W,
                       bool by_tokens) {
  const uint64_t w = uint64_t(W), K = perm.size() / w;
  const MixWanted want = mix_wanted(c, perm, K);
  std::vector<double> x(K, 0);
  double total = 0;
  uint64_t unmixed = 0;
  for (uint64_t t = 0; t < K; ++t) {
    x[t] = double(step_batch(c, perm.data() + t * w, w, by_tokens));
    total += x[t];
    if (step_unmixed(c, perm.data() + t * w, w, want)) ++unmixed;
  }
  StepSpread s;
  const double mean = total / double(std::max<uint64_t>(K, 1));
  if (mean > 0)
    for (double v : x) s.batch_dev = std::max(s.batch_dev, batch_dev_of(v, mean));
  s.unmixed = double(unmixed) / double(std::max<uint64_t>(K, 1));
  return s;
}

// Lays bins out as steps of W (bins in step-major order) for a global batch target. Bins much
// longer than the median ("tall": a long clip alone costs more than a rank's share of a step)
// go together, W to a step, so that as few steps as possible wait on them; the others are
// dealt in a snake by descending samples (or tokens) over the remaining steps, so that every
// step gets a like mix and about the same global batch. Step order and ranks are shuffled.
std::vector<uint32_t> stratified_bins(const BinCounts& c, int W, bool by_tokens, bool group_tall,
                                      Rng rng) {
  const uint64_t bins = c.load.size(), w = uint64_t(W), K = bins / w;
  if (!group_tall) {
    // Every bin in the snake: the steps' global batches and mixes as even as the bins allow,
    // at the price of steps that wait on one tall bin.
    std::vector<uint32_t> all(bins);
    for (uint64_t j = 0; j < bins; ++j) all[j] = uint32_t(j);
    auto key = [&](uint32_t j) { return by_tokens ? c.tokens[j] : uint64_t(c.samples[j]); };
    std::stable_sort(all.begin(), all.end(),
                     [&](uint32_t a, uint32_t b) { return key(a) > key(b); });
    std::vector<uint32_t> laid(bins);
    for (uint64_t i = 0; i < bins; ++i) laid[snake_step(i, K) * w + i / K] = all[i];
    return shuffled_steps(laid, W, rng);
  }
  std::vector<int64_t> loads(c.load);
  std::nth_element(loads.begin(), loads.begin() + int64_t(bins / 2), loads.end());
  const double median = double(loads[bins / 2]);
  std::vector<uint32_t> tall(c.fixed_steps), rest;
  std::vector<uint8_t> placed(bins, 0);
  for (uint32_t j : tall) placed[j] = 1;
  std::vector<uint32_t> more;
  for (uint64_t j = 0; j < bins; ++j)
    if (!placed[j]) (double(c.load[j]) > 1.02 * median ? more : rest).push_back(uint32_t(j));
  auto by_load = [&](uint32_t a, uint32_t b) { return c.load[a] > c.load[b]; };
  std::stable_sort(more.begin(), more.end(), by_load);
  tall.insert(tall.end(), more.begin(), more.end());
  const uint64_t tall_steps = (tall.size() + w - 1) / w;
  if (tall.size() % w != 0) {
    // Complete the last tall step with the longest of the others.
    std::stable_sort(rest.begin(), rest.end(), by_load);
    const uint64_t need = tall_steps * w - tall.size();
    tall.insert(tall.end(), rest.begin(), rest.begin() + int64_t(need));
    rest.erase(rest.begin(), rest.begin() + int64_t(need));
  }
  std::vector<uint32_t> laid(bins);
  std::copy(tall.begin(), tall.end(), laid.begin());
  const uint64_t K2 = K - tall_steps;
  if (K2 > 0) {
    auto key = [&](uint32_t j) { return by_tokens ? c.tokens[j] : uint64_t(c.samples[j]); };
    std::stable_sort(rest.begin(), rest.end(),
                     [&](uint32_t a, uint32_t b) { return key(a) > key(b); });
    for (uint64_t i = 0; i < rest.size(); ++i)
      laid[(tall_steps + snake_step(i, K2)) * w + i / K2] = rest[i];
  }
  return shuffled_steps(laid, W, rng);
}

// Pairs of steps, heaviest longest bin first, re-split (a pass pairs steps 0-1, 2-3, ... of
// that order, the next 1-2, 3-4, ...). Of the pair's bins sorted longest first (l_1 >= l_2 ...),
// the split that puts l_1..l_W in one step leaves l_(W+1) as the other's longest, the least
// possible; where that strays from the batch or the mix, l_1..l_(W-1) with one of the others
// leaves l_W. Every split that lowers the pair's cost is one of these for W <= 3 (it keeps l_1
// and l_2 together); for W >= 4 the others (l_(W-1) apart from l_1) are not tried. With the
// batch held, no step ends further from it than kMaxBatchDev or than the starting layout's
// furthest step (more steps may come near that limit). Passes stop at the first after the
// first that changes nothing.
bool level_steps(const BinCounts& c, std::vector<uint32_t>& perm, int W, bool by_tokens,
                 uint8_t hold, Rng rng) {
  const uint64_t w = uint64_t(W), K = perm.size() / w;
  if (K < 2 || w < 2) return false;  // one rank a step: nothing to even
  const MixWanted want = mix_wanted(c, perm, K);
  uint64_t total = 0;
  for (uint64_t t = 0; t < K; ++t) total += step_batch(c, perm.data() + t * w, w, by_tokens);
  // A step's distance from the batch, as step_spread measures it (0 for an empty batch).
  const double mean = double(total) / double(K);
  auto dist = [&](const uint32_t* s) {
    return mean > 0 ? batch_dev_of(double(step_batch(c, s, w, by_tokens)), mean) : 0.0;
  };
  auto unmixed = [&](const uint32_t* s) { return int(step_unmixed(c, s, w, want)); };
  auto top = [&](uint64_t t) {
    int64_t m = 0;
    for (uint64_t r = 0; r < w; ++r) m = std::max(m, c.load[perm[t * w + r]]);
    return m;
  };
  std::vector<uint8_t> touched(K, 0);
  std::vector<uint64_t> order(K);
  std::vector<int64_t> tops(K);
  std::vector<uint32_t> pool(2 * w), a(w), b(w), best_a(w), best_b(w);
  bool any = false;
  for (int pass = 0; pass < kLevelPasses; ++pass) {
    for (uint64_t t = 0; t < K; ++t) order[t] = t, tops[t] = top(t);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint64_t x, uint64_t y) { return tops[x] > tops[y]; });
    bool changed = false;
    for (uint64_t i = uint64_t(pass % 2); i + 1 < K; i += 2) {
      const uint64_t s = order[i], u = order[i + 1];
      uint32_t* ps = perm.data() + s * w;
      uint32_t* pu = perm.data() + u * w;
      std::copy(ps, ps + w, pool.begin());
      std::copy(pu, pu + w, pool.begin() + int64_t(w));
      std::stable_sort(pool.begin(), pool.end(),
                       [&](uint32_t x, uint32_t y) { return c.load[x] > c.load[y]; });
      const int64_t now = tops[s] + tops[u];
      const double limit = std::max({kMaxBatchDev, dist(ps), dist(pu)});
      const int mixed_now = unmixed(ps) + unmixed(pu);
      int64_t best = now;
      // Split k: the W - 1 longest with pool[W - 1 + k] (k = 0: the W longest) in one step.
      for (uint64_t k = 0; k <= w; ++k) {
        std::copy(pool.begin(), pool.begin() + int64_t(w - 1), a.begin());
        a[w - 1] = pool[w - 1 + k];
        for (uint64_t x = w - 1, y = 0; x < 2 * w; ++x)
          if (x != w - 1 + k) b[y++] = pool[x];
        const int64_t cost = c.load[a[0]] + c.load[b[0]];
        if (cost >= best) continue;
        if ((hold & kHoldBatch) && (dist(a.data()) > limit || dist(b.data()) > limit)) continue;
        if ((hold & kHoldMix) && unmixed(a.data()) + unmixed(b.data()) > mixed_now) continue;
        best = cost, best_a = a, best_b = b;
      }
      if (best < now) {
        std::copy(best_a.begin(), best_a.end(), ps);
        std::copy(best_b.begin(), best_b.end(), pu);
        touched[s] = touched[u] = 1;
        changed = any = true;
      }
    }
    if (!changed && pass > 0) break;
  }
  if (any)
    for (uint64_t t = 0; t < K; ++t)
      if (touched[t]) rng.shuffle(perm.data() + t * w, w);
  return any;
}

}  // namespace adaptiveload
