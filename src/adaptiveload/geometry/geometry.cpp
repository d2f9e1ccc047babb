#include "adaptiveload/geometry/geometry.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <unordered_map>

#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"

namespace adaptiveload {

std::string Bucket::name() const { return tier + "-" + ratio + "-" + std::to_string(frames) + "f"; }

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

namespace {

using Shape = std::array<int, 3>;               // frames, height, width (pixels)
constexpr uint32_t kExtraKey = UINT32_MAX - 1;  // a fixed row whose shape the grid does not list

// Why a fixed row's shape cannot be a bucket of `model` (its latent would not be whole
// patches), or "".
std::string fixed_shape_problem(const ClipInfo& c, const ModelPreset& model) {
  const int mh = model.spatial_multiple_h(), mw = model.spatial_multiple_w();
  if (c.num_frames > 1 && (c.num_frames - 1) % model.vae_t != 0)
    return "cached shape " + std::to_string(c.num_frames) +
           " frames is not 1 + a multiple of the VAE's " + std::to_string(model.vae_t) +
           " (the cache was made for another model)";
  if (c.height % mh != 0 || c.width % mw != 0)
    return "cached shape " + std::to_string(c.height) + "x" + std::to_string(c.width) +
           " is not a multiple of the model's " + std::to_string(mh) + "x" + std::to_string(mw) +
           " pixels (the cache was made for another model)";
  return {};
}

// The grid's key (tier, ratio, frame index) of every shape it lists; where two keys share a
// shape, the one the grid's own rule picks for a clip of exactly that shape (the larger tier,
// the first ratio).
std::map<Shape, uint32_t> grid_shape_keys(const BucketGrid& grid, size_t max_ratios) {
  std::map<Shape, uint32_t> out;
  const size_t nf = grid.frames.size();
  for (size_t ti = 0; ti < grid.tiers.size(); ++ti)
    for (size_t ri = grid.tiers[ti].sizes.size(); ri-- > 0;)
      for (size_t fi = 0; fi < nf; ++fi) {
        const TierSize& s = grid.tiers[ti].sizes[ri];
        out[{grid.frames[fi], s.h, s.w}] = uint32_t((ti * max_ratios + ri) * nf + fi);
      }
  return out;
}

}  // namespace

std::array<int64_t, 4> latent_shape(const Bucket& b, const ModelPreset& m) {
  return {m.latent_channels, 1 + (int64_t(b.frames) - 1) / m.vae_t, b.height / m.vae_h,
          b.width / m.vae_w};
}

// long-function: one pass over the manifest's rows; its caches (the dense key map, the per-size
// spatial choice) and the fixed rows' own buckets share locals
Bucketing assign_buckets(const Manifest& manifest, const BucketGrid& grid,
                         const ModelPreset& model) {
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
    for (const TierSize& s : grid.tiers[ti].sizes)
      tier_log[ti].push_back(std::log(double(s.h) / s.w));
  std::unordered_map<uint64_t, uint32_t> spatial_of;
  // A direct-mapped cache in front of the map: a manifest has few distinct sizes, in any order.
  constexpr size_t kCache = 1024;
  std::vector<std::pair<uint64_t, uint32_t>> cache(kCache, {UINT64_MAX, UINT32_MAX});
  // Fixed rows (a latent cache's): their own shape, the grid's bucket where it lists the shape.
  const std::map<Shape, uint32_t> grid_keys =
      manifest.any_fixed() ? grid_shape_keys(grid, max_ratios) : std::map<Shape, uint32_t>();
  std::map<Shape, int64_t> extra_count;
  for (int64_t row = 0; row < n; ++row) {
    if (!manifest.usable(row)) {
      ++(manifest.skipped_duplicate(row) ? out.duplicates : out.bad);
      continue;
    }
    const ClipInfo& c = manifest.clip(row);
    if (manifest.any_fixed() && manifest.fixed(row)) {
      if (std::string why = fixed_shape_problem(c, model); !why.empty()) {
        out.unfit.push_back({row, std::move(why)});
        continue;
      }
      const Shape shape{int(c.num_frames), c.height, c.width};
      if (auto it = grid_keys.find(shape); it != grid_keys.end()) {
        key_of[size_t(row)] = it->second;
        ++key_count[it->second];
      } else {
        key_of[size_t(row)] = kExtraKey;
        ++extra_count[shape];
      }
      continue;
    }
    size_t fi = 0;
    if (c.num_frames == 1) {
      if (!images_ok) {
        out.unfit.push_back({row, "image (1 frame) but the grid has no 1-frame bucket"});
        continue;
      }
      fi = 0;
    } else {
      int64_t avail = resampled_frames(c.num_frames, c.fps, grid.fps);
      auto it = std::upper_bound(grid.frames.begin(), grid.frames.end(),
                                 int(std::min<int64_t>(avail, INT32_MAX)));
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
      out.unfit.push_back({row, "too small: " + std::to_string(c.height) + "x" +
                                    std::to_string(c.width) +
                                    " is smaller than every bucket of its aspect ratio"});
    }
  }
  std::vector<uint32_t> id_of_key(key_count.size(), kNoBucket);
  for (size_t key = 0; key < key_count.size(); ++key) {
    if (key_count[key] == 0) continue;
    if (out.buckets.size() >= kNoBucket)
      throw ConfigError("more than 65,534 buckets in use; use a coarser grid");
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
  // Shapes of fixed rows the grid does not list: buckets of their own, after the grid's, in
  // (frames, height, width) order.
  std::map<Shape, uint16_t> extra_id;
  for (const auto& [shape, count] : extra_count) {
    if (out.buckets.size() >= kNoBucket)
      throw ConfigError("more than 65,534 buckets in use; use a coarser grid");
    Bucket b = make_bucket(shape[0], shape[1], shape[2], model);
    b.tier = "fixed";
    b.ratio = std::to_string(shape[1]) + "x" + std::to_string(shape[2]);
    extra_id[shape] = uint16_t(out.buckets.size());
    out.buckets.push_back(std::move(b));
    out.bucket_counts.push_back(count);
  }
  for (int64_t row = 0; row < n; ++row) {
    uint32_t key = key_of[size_t(row)];
    if (key == UINT32_MAX) continue;
    if (key == kExtraKey) {
      const ClipInfo c = manifest.clip(row);
      out.sample_bucket[size_t(row)] = extra_id.at({int(c.num_frames), c.height, c.width});
    } else {
      out.sample_bucket[size_t(row)] = uint16_t(id_of_key[key]);
    }
    ++out.usable;
  }
  return out;
}

}  // namespace adaptiveload
