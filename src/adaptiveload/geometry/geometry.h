#pragma once
// Geometry: clip -> bucket (F', H', W') -> token count S. A clip goes to the largest bucket
// it fits without upscaling: frames after resampling to the grid's fps, the largest tier
// whose size for the nearest aspect ratio fits inside the clip, and that ratio's size.
// Token count (Wan: VAE 4x8x8, patch 1x2x2): f = 1 + (F'-1)/4, S = f * H'/16 * W'/16.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/presets/presets.h"

namespace adaptiveload {

struct Bucket {
  int frames = 1, height = 0, width = 0;       // F', H', W' in pixels
  int64_t grid_f = 1, grid_h = 0, grid_w = 0;  // token grid: frames, rows, columns
  int64_t tokens = 0;                          // S = grid_f * grid_h * grid_w
  std::string tier, ratio;
  std::string name() const;  // "480p-16:9-81f"
};

constexpr uint16_t kNoBucket = 0xffff;

struct UnfitRow {
  int64_t row = 0;
  std::string reason;
};

struct Bucketing {
  std::vector<Bucket> buckets;          // ordered by (tier, ratio, frames) of the grid
  std::vector<uint16_t> sample_bucket;  // per manifest row; kNoBucket when not usable
  std::vector<int64_t> bucket_counts;   // samples per bucket
  int64_t usable = 0;                   // rows with a bucket
  int64_t bad = 0;                      // rows rejected by the manifest reader
  int64_t duplicates = 0;               // rows left out as repeats of an earlier path
  std::vector<UnfitRow> unfit;          // rows that fit no bucket, with the reason
};

// Token count of one bucket shape under a model's VAE strides and patch.
Bucket make_bucket(int frames, int height, int width, const ModelPreset& model);

// The latent of a sample at bucket `b`: [channels, frames, height, width] under the model's VAE
// (a causal VAE keeps the first frame: 1 + (F' - 1) / vae_t frames).
std::array<int64_t, 4> latent_shape(const Bucket& b, const ModelPreset& model);

// Assigns every usable manifest row to a bucket; a fixed row (Manifest::fixed, a latent
// cache's) gets exactly its own shape: the grid's bucket of that shape where the grid lists it,
// else a bucket of its own (tier "fixed", after the grid's, ordered by shape); rows that fit
// nothing are listed in `unfit` with a reason, never dropped silently.
Bucketing assign_buckets(const Manifest& manifest, const BucketGrid& grid,
                         const ModelPreset& model);

// Frames available after resampling a clip to `grid_fps` (duration-preserving).
int64_t resampled_frames(int64_t num_frames, double fps, double grid_fps);

}  // namespace adaptiveload
