#include "adaptiveload/geometry/geometry.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"

namespace adaptiveload {

std::string Bucket::name() const {
  return tier + "-" + ratio + "-" + std::to_string(frames) + "f";
}

Bucket make_bucket(int frames, int height, int width, const ModelPreset& m) {
  Bucket b;
  b.frames = frames, b.height = height, b.width = width;
  int64_t latent_f = 1 + (int64_t(frames) - 1) / m.vae_t;  // causal VAE keeps the first frame
  b.grid_f = (latent_f + m.patch_t - 1) / m.patch_t;
  b.grid_h = height / m.spatial_multiple_h();
  b.grid_w = width / m.spatial_multiple_w();
  b.tokens = b.grid_f * b.grid_h * b.grid_w;
  return b;
}

int64_t resampled_frames(int64_t num_frames, double fps, double grid_fps) {
  if (num_frames <= 1 || !(fps > 0) || !(grid_fps > 0)) return num_frames;
  // Small epsilon so 29.97 fps clips of exact length do not lose a frame to rounding. In
  // double, then clamped: an extreme fps ratio must not overflow the conversion to int64.
  const double f = std::floor(double(num_frames - 1) * grid_fps / fps + 1e-9);
  if (!(f < 9e18)) return INT64_MAX;
  return int64_t(f) + 1;
}

Bucketing assign_buckets(const Manifest& manifest, const BucketGrid& grid, const ModelPreset& model) {
  Bucketing out;
  const int64_t n = manifest.total_rows();
  out.sample_bucket.assign(size_t(n), kNoBucket);
  size_t max_ratios = 0;
  for (const Tier& t : grid.tiers) max_ratios = std::max(max_ratios, t.sizes.size());
  const size_t nf = grid.frames.size();
  // Dense key (tier, ratio, frame index) -> bucket id, assigned in key order afterwards so ids
  // do not depend on the order of the manifest.
  std::vector<int64_t> key_count(grid.tiers.size() * max_ratios * nf, 0);
  std::vector<uint32_t> key_of(size_t(n), UINT32_MAX);
  const bool images_ok = grid.frames.front() == 1;
  auto first_video = std::upper_bound(grid.frames.begin(), grid.frames.end(), 1);
  const int min_video_frames = first_video == grid.frames.end() ? 0 : *first_video;
  std::vector<std::vector<double>> tier_log(grid.tiers.size());
  for (size_t ti = 0; ti < grid.tiers.size(); ++ti)
    for (const TierSize& s : grid.tiers[ti].sizes) tier_log[ti].push_back(std::log(double(s.h) / s.w));
  std::unordered_map<uint64_t, uint32_t> spatial_of;
  // A direct-mapped cache in front of the map: a manifest has few distinct sizes, in any order.
  constexpr size_t kCache = 1024;
  std::vector<std::pair<uint64_t, uint32_t>> cache(kCache, {UINT64_MAX, UINT32_MAX});
  for (int64_t row = 0; row < n; ++row) {
    if (!manifest.usable(row)) {
      ++(manifest.skipped_duplicate(row) ? out.duplicates : out.bad);
      continue;
    }
    const ClipInfo& c = manifest.clip(row);
    size_t fi = 0;
    if (c.num_frames == 1) {
      if (!images_ok) {
        out.unfit.push_back({row, "image (1 frame) but the grid has no 1-frame bucket"});
        continue;
      }
      fi = 0;
    } else {
      int64_t avail = resampled_frames(c.num_frames, c.fps, grid.fps);
      auto it = std::upper_bound(grid.frames.begin(), grid.frames.end(), int(std::min<int64_t>(avail, INT32_MAX)));
      if (it == grid.frames.begin() || *(it - 1) == 1) {
        out.unfit.push_back({row, "too short: " + std::to_string(c.num_frames) + " frames give " +
                                      std::to_string(avail) + " at " + fmt("%g", grid.fps) +
                                      " fps; the shortest video bucket needs " +
                                      std::to_string(min_video_frames)});
        continue;
      }
      fi = size_t(it - grid.frames.begin() - 1);
    }
    // The spatial choice depends only on (height, width): computed once per distinct size.
    const uint64_t hw = (uint64_t(uint32_t(c.height)) << 32) | uint32_t(c.width);
    uint32_t spatial;  // ti * max_ratios + ratio index, or UINT32_MAX: too small
    auto& slot = cache[size_t((hw * 0x9E3779B97F4A7C15ull) >> 54)];
    if (slot.first == hw) {
      spatial = slot.second;
    } else if (auto it = spatial_of.find(hw); it != spatial_of.end()) {
      spatial = it->second;
    } else {
      spatial = UINT32_MAX;
      const double clip_ratio = std::log(double(c.height) / double(c.width));
      for (size_t ti = grid.tiers.size(); ti-- > 0;) {
        const Tier& tier = grid.tiers[ti];
        size_t best = 0;
        double best_d = 1e300;
        for (size_t ri = 0; ri < tier.sizes.size(); ++ri) {
          double d = std::fabs(tier_log[ti][ri] - clip_ratio);
          if (d < best_d - 1e-12) best_d = d, best = ri;
        }
        const TierSize& s = tier.sizes[best];
        if (s.h <= c.height && s.w <= c.width) {
          spatial = uint32_t(ti * max_ratios + best);
          break;
        }
      }
      spatial_of.emplace(hw, spatial);
    }
    slot = {hw, spatial};
    if (spatial != UINT32_MAX) {
      const uint32_t key = uint32_t(spatial * nf + fi);
      key_of[size_t(row)] = key;
      ++key_count[key];
    } else {
      out.unfit.push_back({row, "too small: " + std::to_string(c.height) + "x" + std::to_string(c.width) +
                                    " is smaller than every bucket of its aspect ratio"});
    }
  }
  std::vector<uint32_t> id_of_key(key_count.size(), kNoBucket);
  for (size_t key = 0; key < key_count.size(); ++key) {
    if (key_count[key] == 0) continue;
    if (out.buckets.size() >= kNoBucket) throw ConfigError("more than 65,534 buckets in use; use a coarser grid");
    size_t fi = key % nf, ri = (key / nf) % max_ratios, ti = key / nf / max_ratios;
    const TierSize& s = grid.tiers[ti].sizes[ri];
    Bucket b = make_bucket(grid.frames[fi], s.h, s.w, model);
    b.tier = grid.tiers[ti].name;
    b.ratio = s.ratio;
    if (b.tokens <= 0)
      throw ConfigError("bucket " + b.name() + " has no tokens: sizes must be at least " +
                        std::to_string(model.spatial_multiple_h()) + " pixels");
    id_of_key[key] = uint32_t(out.buckets.size());
    out.buckets.push_back(std::move(b));
    out.bucket_counts.push_back(key_count[key]);
  }
  for (int64_t row = 0; row < n; ++row) {
    uint32_t key = key_of[size_t(row)];
    if (key == UINT32_MAX) continue;
    out.sample_bucket[size_t(row)] = uint16_t(id_of_key[key]);
    ++out.usable;
  }
  return out;
}

}  // namespace adaptiveload
