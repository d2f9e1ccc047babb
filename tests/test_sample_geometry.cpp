// The planner's temporal and crop rules for one sample (geometry/sample_geometry.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "adaptiveload/geometry/geometry.h"
#include "adaptiveload/geometry/sample_geometry.h"
#include "adaptiveload/presets/presets.h"
#include "adaptiveload/util/error.h"

using namespace adaptiveload;

namespace {

Bucket bucket(int f, int h, int w) {
  Bucket b = make_bucket(f, h, w, load_model("wan2.1-1.3b"));
  b.tier = "t", b.ratio = "r";
  return b;
}

ClipInfo clip(int64_t frames, int h, int w, double fps) { return ClipInfo{frames, h, w, fps}; }

}  // namespace

TEST(SampleGeometry, SameRateTakesConsecutiveFrames) {
  SampleGeometry g = sample_geometry(clip(81, 480, 832, 16), bucket(81, 480, 832), 16, 0, 0, 3);
  ASSERT_EQ(g.frames.size(), 81u);
  for (int k = 0; k < 81; ++k) EXPECT_EQ(g.frames[size_t(k)], k);
  EXPECT_EQ(g.resize_h, 480);
  EXPECT_EQ(g.resize_w, 832);
  EXPECT_EQ(g.crop_top, 0);
  EXPECT_EQ(g.crop_left, 0);
}

TEST(SampleGeometry, DoubleRateTakesEveryOtherFrame) {
  // 161 frames at 32 fps = 81 at 16 fps: the whole clip, every other frame.
  SampleGeometry g = sample_geometry(clip(161, 720, 1280, 32), bucket(81, 480, 832), 16, 7, 2, 11);
  ASSERT_EQ(g.frames.size(), 81u);
  for (int k = 0; k < 81; ++k) EXPECT_EQ(g.frames[size_t(k)], 2 * k);
}

TEST(SampleGeometry, NtscClipNearestFramesInsideTheClip) {
  // Taichi-HD's shortest clip: 128 frames at 29.97 give 68 at 16 fps; bucket 65: start in [0, 3].
  std::set<int64_t> starts;
  for (int64_t row = 0; row < 200; ++row) {
    SampleGeometry g =
        sample_geometry(clip(128, 256, 256, 29.97), bucket(65, 256, 256), 16, 1, 0, row);
    ASSERT_EQ(g.frames.size(), 65u);
    const int64_t s = int64_t(std::lround(double(g.frames[0]) * 16 / 29.97));
    starts.insert(s);
    for (int k = 0; k < 65; ++k) {
      EXPECT_EQ(g.frames[size_t(k)], int64_t(std::floor((s + k) * 29.97 / 16 + 0.5)));
      EXPECT_LE(g.frames[size_t(k)], 127);
    }
  }
  EXPECT_EQ(starts, (std::set<int64_t>{0, 1, 2, 3}));  // every start of the window is drawn
}

TEST(SampleGeometry, SlowClipRepeatsFrames) {
  // 8 fps on a 16 fps grid: 41 frames last 5 s = 81 grid frames; each source frame twice.
  SampleGeometry g = sample_geometry(clip(41, 480, 832, 8), bucket(81, 480, 832), 16, 0, 0, 0);
  ASSERT_EQ(g.frames.size(), 81u);
  for (int k = 0; k < 81; ++k) EXPECT_EQ(g.frames[size_t(k)], (k + 1) / 2) << k;
}

TEST(SampleGeometry, WindowIsDeterministicPerSeedEpochRow) {
  auto first = [](uint64_t seed, uint64_t epoch, int64_t row) {
    return sample_geometry(clip(1000, 480, 832, 16), bucket(81, 480, 832), 16, seed, epoch, row)
        .frames[0];
  };
  EXPECT_EQ(first(5, 1, 9), first(5, 1, 9));
  int differ_epoch = 0, differ_seed = 0, differ_row = 0;
  for (int64_t r = 0; r < 50; ++r) {
    differ_epoch += first(5, 1, r) != first(5, 2, r);
    differ_seed += first(5, 1, r) != first(6, 1, r);
    differ_row += first(5, 1, r) != first(5, 1, r + 1);
  }
  EXPECT_GT(differ_epoch, 40);  // 920 starts: a repeat is rare
  EXPECT_GT(differ_seed, 40);
  EXPECT_GT(differ_row, 40);
  EXPECT_EQ(frame_window_start(81, 81, 1, 2, 3), 0);  // no slack: the window is the clip
}

TEST(SampleGeometry, EveryBucketedRowGetsFramesThatExist) {
  // Many clips against the grids' own bucketing: every index exists, F' of them, ascending.
  for (const char* grid_name : {"wan", "tiny", "mini", "cogvideox"}) {
    const BucketGrid grid = load_grid(grid_name);
    std::string text = "path,num_frames,height,width,fps\n";
    const double rates[] = {8, 12, 15, 16, 23.976, 24, 25, 29.97, 30, 50, 59.94, 60, 120};
    int n = 0;
    for (double fps : rates)
      for (int frames = 2; frames < 400; frames += 7)
        text += "c" + std::to_string(n++) + ".mp4," + std::to_string(frames) + ",1080,1920," +
                std::to_string(fps) + "\n";
    Manifest m;
    m.load_text(text, "m.csv", BadRowPolicy::kError);
    const Bucketing bk = assign_buckets(m, grid, load_model("wan2.1-1.3b"));
    int64_t checked = 0;
    for (int64_t row = 0; row < m.total_rows(); ++row) {
      if (bk.sample_bucket[size_t(row)] == kNoBucket) continue;
      const Bucket& b = bk.buckets[bk.sample_bucket[size_t(row)]];
      const ClipInfo c = m.clip(row);
      for (uint64_t epoch = 0; epoch < 3; ++epoch) {
        SampleGeometry g = sample_geometry(c, b, grid.fps, 42, epoch, row);
        ASSERT_EQ(int64_t(g.frames.size()), b.frames) << grid_name << " row " << row;
        EXPECT_GE(g.frames.front(), 0);
        EXPECT_LT(g.frames.back(), c.num_frames) << grid_name << " row " << row;
        EXPECT_TRUE(std::is_sorted(g.frames.begin(), g.frames.end()));
        // The window spans the bucket's duration: (F' - 1) grid frames of source time.
        const double span = double(g.frames.back() - g.frames.front()) / c.fps;
        EXPECT_NEAR(span, (b.frames - 1) / grid.fps, 1.0 / c.fps + 1e-9)
            << grid_name << " row " << row;
      }
      ++checked;
    }
    EXPECT_GT(checked, 100) << grid_name;
  }
}

TEST(SampleGeometry, ResizeKeepsAspectAndCropsTheCentre) {
  // 720x1280 to 480x832: the height binds (480/720 > 832/1280); 1280 * 2/3 = 853.3 -> 853.
  SampleGeometry g = sample_geometry(clip(81, 720, 1280, 16), bucket(81, 480, 832), 16, 0, 0, 0);
  EXPECT_EQ(g.resize_h, 480);
  EXPECT_EQ(g.resize_w, 853);
  EXPECT_EQ(g.crop_top, 0);
  EXPECT_EQ(g.crop_left, 10);
  EXPECT_EQ(g.height, 480);
  EXPECT_EQ(g.width, 832);
  // A 4:3 image into a 16:9 bucket: the width binds, rows cropped top and bottom.
  g = sample_geometry(clip(1, 600, 800, 0), bucket(1, 360, 640), 16, 0, 0, 0);
  EXPECT_EQ(g.frames, std::vector<int64_t>{0});
  EXPECT_EQ(g.resize_w, 640);
  EXPECT_EQ(g.resize_h, 480);
  EXPECT_EQ(g.crop_top, 60);
  EXPECT_EQ(g.crop_left, 0);
  // Exactly the bucket's size: no resize, no crop.
  g = sample_geometry(clip(1, 48, 80, 0), bucket(1, 48, 80), 16, 0, 0, 0);
  EXPECT_EQ(std::make_pair(g.resize_h, g.resize_w), std::make_pair(48, 80));
  // Every size into every bucket it covers: the resize covers the bucket, never upscales, and
  // keeps the aspect ratio to within a pixel's rounding.
  for (int h = 32; h <= 200; h += 7)
    for (int w = 32; w <= 200; w += 5)
      for (auto [bh, bw] : {std::pair{32, 64}, {64, 32}, {48, 48}, {32, 48}, {96, 160}}) {
        if (bh > h || bw > w) continue;
        g = sample_geometry(clip(1, h, w, 0), bucket(1, bh, bw), 16, 0, 0, 0);
        ASSERT_GE(g.resize_h, bh);
        ASSERT_GE(g.resize_w, bw);
        EXPECT_TRUE(g.resize_h == bh || g.resize_w == bw);
        EXPECT_LE(g.resize_h, h);
        EXPECT_LE(g.resize_w, w);
        EXPECT_NEAR(double(g.resize_w) / g.resize_h, double(w) / h,
                    1.0 / std::min(g.resize_h, g.resize_w) * 2);
        EXPECT_EQ(g.crop_top, (g.resize_h - bh) / 2);
        EXPECT_EQ(g.crop_left, (g.resize_w - bw) / 2);
      }
}

TEST(SampleGeometry, RefusesABucketTheClipDoesNotFit) {
  auto msg = [](const ClipInfo& c, const Bucket& b) {
    try {
      sample_geometry(c, b, 16, 0, 0, 12);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg(clip(40, 480, 832, 16), bucket(81, 480, 832))
                .find("manifest row 12: 40 frames at 16 fps give 40"),
            std::string::npos);
  EXPECT_NE(msg(clip(81, 400, 832, 16), bucket(81, 480, 832)).find("smaller than its bucket"),
            std::string::npos);
  EXPECT_NE(msg(clip(1, 480, 832, 0), bucket(81, 480, 832)).find("an image (1 frame)"),
            std::string::npos);
  EXPECT_NE(msg(ClipInfo{}, bucket(1, 32, 32)).find("not a usable row"), std::string::npos);
}
