#include "adaptiveload/geometry/sample_geometry.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/rng.h"

namespace adaptiveload {
namespace {

// Source frame nearest grid frame j: round(j * fps / grid_fps), at most the last frame.
int64_t source_frame(int64_t j, double fps, double grid_fps, int64_t num_frames) {
  if (!(fps > 0) || !(grid_fps > 0)) return std::min(j, num_frames - 1);
  const double t = std::floor(double(j) * fps / grid_fps + 0.5 + 1e-9);
  return std::clamp(int64_t(t), int64_t(0), num_frames - 1);
}

// Resize with the aspect ratio kept to the smallest size covering (bh, bw): the binding side
// exactly the bucket's, the other the nearest pixel, at least the bucket's.
void cover_size(int h, int w, int bh, int bw, int& out_h, int& out_w) {
  const int64_t H = bh, W = bw;
  if (H * w >= W * h) {  // the height binds: scale bh / h
    out_h = bh;
    out_w = int(std::max<int64_t>(W, (2 * int64_t(w) * H + h) / (2 * int64_t(h))));
  } else {  // the width binds: scale bw / w
    out_w = bw;
    out_h = int(std::max<int64_t>(H, (2 * int64_t(h) * W + w) / (2 * int64_t(w))));
  }
}

}  // namespace

int64_t frame_window_start(int64_t available, int frames, uint64_t seed, uint64_t epoch,
                           int64_t row) {
  const int64_t slack = available - frames;
  if (slack <= 0) return 0;
  // for_purpose's derivation with the row mixed into the seed: one stream per (seed, epoch, row).
  Rng rng(mix64(mix64(seed ^ mix64(epoch + 0x9e3779b97f4a7c15ULL)) ^ uint64_t(row)),
          mix64(kPurposeFrameWindow) >> 1);
  return int64_t(rng.below64(uint64_t(slack) + 1));
}

SampleGeometry sample_geometry(const ClipInfo& clip, const Bucket& bucket, double grid_fps,
                               uint64_t seed, uint64_t epoch, int64_t row) {
  const std::string where = "manifest row " + std::to_string(row);
  if (clip.num_frames < 1 || clip.height < 1 || clip.width < 1)
    throw InputError(where, "not a usable row (no frames or no size): it has no sample geometry");
  if (bucket.height > clip.height || bucket.width > clip.width)
    throw InputError(where, std::to_string(clip.height) + "x" + std::to_string(clip.width) +
                                " is smaller than its bucket " + bucket.name() + " (" +
                                std::to_string(bucket.height) + "x" + std::to_string(bucket.width) +
                                "): not the bucket the planner gives it");
  SampleGeometry g;
  g.height = bucket.height, g.width = bucket.width;
  if (clip.num_frames == 1) {
    if (bucket.frames != 1)
      throw InputError(where, "an image (1 frame) cannot fill the " +
                                  std::to_string(bucket.frames) + "-frame bucket " + bucket.name());
    g.frames.push_back(0);
  } else {
    const int64_t available = resampled_frames(clip.num_frames, clip.fps, grid_fps);
    if (available < bucket.frames)
      throw InputError(where, std::to_string(clip.num_frames) + " frames at " +
                                  fmt("%g", clip.fps) + " fps give " + std::to_string(available) +
                                  " at " + fmt("%g", grid_fps) + " fps, fewer than the " +
                                  std::to_string(bucket.frames) + " of bucket " + bucket.name());
    const int64_t start = frame_window_start(available, bucket.frames, seed, epoch, row);
    g.frames.reserve(size_t(bucket.frames));
    for (int k = 0; k < bucket.frames; ++k)
      g.frames.push_back(source_frame(start + k, clip.fps, grid_fps, clip.num_frames));
  }
  cover_size(clip.height, clip.width, bucket.height, bucket.width, g.resize_h, g.resize_w);
  g.crop_top = (g.resize_h - bucket.height) / 2;
  g.crop_left = (g.resize_w - bucket.width) / 2;
  return g;
}

}  // namespace adaptiveload
