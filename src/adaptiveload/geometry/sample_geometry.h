#pragma once
// Where a sample's pixels come from: the planner's temporal and spatial rules for one manifest
// row at its bucket (F', H', W'), the one implementation the data path uses (the Python
// dataset calls it through the binding; it never computes frames or crops itself).
//
// Temporal: the clip is resampled to the grid's fps, duration kept (resampled_frames, the rule
// assign_buckets uses to choose the bucket), which gives A >= F' frames on the grid's time
// line; a window of F' consecutive grid frames starts at s, drawn uniformly from [0, A - F']
// by the project's generator for (seed, epoch, row); grid frame j is shown at j / grid_fps and
// maps to the source frame nearest that time, round(j * fps / grid_fps), never past the last
// frame. A source slower than the grid repeats frames; a faster one skips. Images (1 frame)
// take frame 0. A clip without an fps is taken at the grid's.
//
// Spatial: the frame is resized with its aspect ratio kept to the smallest size that covers
// (H', W') (the side that binds is exactly the bucket's, the other rounded to the nearest
// pixel and never below the bucket's), then centre-cropped to (H', W'). The bucket is never
// larger than the clip (no upscaling), so the resize only shrinks or keeps the size.
#include <cstdint>
#include <vector>

#include "adaptiveload/geometry/geometry.h"
#include "adaptiveload/manifest/manifest.h"

namespace adaptiveload {

struct SampleGeometry {
  std::vector<int64_t> frames;      // source frame indices, F' of them, non-decreasing
  int resize_h = 0, resize_w = 0;   // the source frame is resized to this (aspect kept)
  int crop_top = 0, crop_left = 0;  // the crop box in the resized frame: (top, left, H', W')
  int height = 0, width = 0;        // H', W': the bucket's size
};

// The RNG purpose of the frame window (util/rng.h): with the row mixed into the seed, one
// independent stream per (seed, epoch, row), apart from the planner's purposes
// (strategy.h's RngPurpose, 1..7).
constexpr uint64_t kPurposeFrameWindow = 64;

// Start of the F'-frame window on the grid's time line, in [0, available - frames]:
// deterministic per (seed, epoch, row). `available` >= `frames` >= 1.
int64_t frame_window_start(int64_t available, int frames, uint64_t seed, uint64_t epoch,
                           int64_t row);

// The source frames and the resize and crop of manifest row `row` (clip `clip`) at `bucket`.
// Throws InputError when the clip does not fit the bucket (fewer frames after resampling than
// the bucket's, or smaller than its size): a bucket the planner did not give this clip.
SampleGeometry sample_geometry(const ClipInfo& clip, const Bucket& bucket, double grid_fps,
                               uint64_t seed, uint64_t epoch, int64_t row);

}  // namespace adaptiveload
