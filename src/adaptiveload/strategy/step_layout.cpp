#include "adaptiveload/strategy/step_layout.h"

#include <algorithm>
#include <cmath>

namespace adaptiveload {

// Epoch ticks of a dealing once bins are laid out as steps by `perm`.
int64_t epoch_ticks(const BinCounts& c, const std::vector<uint32_t>& perm, int W, int64_t allreduce) {
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
    std::copy(laid.begin() + int64_t(step_perm[t] * w), laid.begin() + int64_t((step_perm[t] + 1) * w),
              out.begin() + int64_t(t * w));
    rng.shuffle(out.data() + t * w, w);
  }
  return out;
}

// How far a layout is from the global batch and from a like mix in every step:
// `batch_dev` the largest |x_t - mean| / mean of the steps' tokens (or samples), `unmixed`
// the share of steps without an image while the pool has one for every step, or without a
// clip while it has one for every step.
StepSpread step_spread(const BinCounts& c, const std::vector<uint32_t>& perm, int W, bool by_tokens) {
  const uint64_t w = uint64_t(W), K = perm.size() / w;
  uint64_t images = 0, samples = 0;
  for (uint64_t j = 0; j < perm.size(); ++j) images += c.images[j], samples += c.samples[j];
  const bool want_image = images >= K, want_clip = samples - images >= K;
  std::vector<double> x(K, 0);
  double total = 0;
  uint64_t unmixed = 0;
  for (uint64_t t = 0; t < K; ++t) {
    uint64_t im = 0, n = 0;
    for (uint64_t r = 0; r < w; ++r) {
      const uint32_t j = perm[t * w + r];
      x[t] += by_tokens ? double(c.tokens[j]) : double(c.samples[j]);
      im += c.images[j], n += c.samples[j];
    }
    total += x[t];
    if ((want_image && im == 0) || (want_clip && im == n)) ++unmixed;
  }
  StepSpread s;
  const double mean = total / double(std::max<uint64_t>(K, 1));
  if (mean > 0)
    for (double v : x) s.batch_dev = std::max(s.batch_dev, std::abs(v - mean) / mean);
  s.unmixed = double(unmixed) / double(std::max<uint64_t>(K, 1));
  return s;
}

// Lays bins out as steps of W (bins in step-major order) for a global batch target. Bins much
// longer than the median ("tall": a long clip alone costs more than a rank's share of a step)
// go together, W to a step, so that as few steps as possible wait on them; the others are
// dealt in a snake by descending samples (or tokens) over the remaining steps, so that every
// step gets a like mix and about the same global batch. Step order and ranks are shuffled.
std::vector<uint32_t> stratified_bins(const BinCounts& c, int W, bool by_tokens, bool group_tall, Rng rng) {
  const uint64_t bins = c.load.size(), w = uint64_t(W), K = bins / w;
  if (!group_tall) {
    // Every bin in the snake: the steps' global batches and mixes as even as the bins allow,
    // at the price of steps that wait on one tall bin.
    std::vector<uint32_t> all(bins);
    for (uint64_t j = 0; j < bins; ++j) all[j] = uint32_t(j);
    auto key = [&](uint32_t j) { return by_tokens ? c.tokens[j] : uint64_t(c.samples[j]); };
    std::stable_sort(all.begin(), all.end(), [&](uint32_t a, uint32_t b) { return key(a) > key(b); });
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
    std::stable_sort(rest.begin(), rest.end(), [&](uint32_t a, uint32_t b) { return key(a) > key(b); });
    for (uint64_t i = 0; i < rest.size(); ++i) laid[(tall_steps + snake_step(i, K2)) * w + i / K2] = rest[i];
  }
  return shuffled_steps(laid, W, rng);
}

}  // namespace adaptiveload
