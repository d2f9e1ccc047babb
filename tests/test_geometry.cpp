#include <gtest/gtest.h>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/geometry/geometry.h"
#include "adaptiveload/presets/presets.h"
#include "adaptiveload/util/error.h"

using namespace adaptiveload;

TEST(Geometry, WanTokenCountsFromDesign) {
  ModelPreset wan = load_model("wan2.1-1.3b");
  EXPECT_EQ(make_bucket(81, 480, 832, wan).tokens, 32760);
  EXPECT_EQ(make_bucket(81, 720, 1280, wan).tokens, 75600);
  EXPECT_EQ(make_bucket(1, 480, 832, wan).tokens, 1560);
  Bucket b = make_bucket(81, 480, 832, wan);
  EXPECT_EQ(b.grid_f, 21);
  EXPECT_EQ(b.grid_h, 30);
  EXPECT_EQ(b.grid_w, 52);
  // HunyuanVideo 720p, 129 frames: the 118,800 tokens of the kernel benchmark shapes.
  EXPECT_EQ(make_bucket(129, 720, 1280, load_model("hunyuanvideo")).tokens, 118800);
}

TEST(Geometry, PresetsMatchDesign) {
  ModelPreset s = load_model("wan2.1-1.3b"), l = load_model("wan2.1-14b");
  EXPECT_EQ(s.dim, 1536);
  EXPECT_EQ(s.ffn_dim, 8960);
  EXPECT_EQ(s.layers, 30);
  EXPECT_EQ(s.heads, 12);
  EXPECT_EQ(s.text_len, 512);
  EXPECT_EQ(l.dim, 5120);
  EXPECT_EQ(l.ffn_dim, 13824);
  EXPECT_EQ(l.layers, 40);
  EXPECT_EQ(l.heads, 40);
  EXPECT_NEAR(s.params / 1e9, 1.4, 0.1);  // "1.3B"
  EXPECT_NEAR(l.params / 1e9, 14.0, 0.5);
  for (const auto& name : preset_names("models")) EXPECT_NO_THROW(load_model(name)) << name;
  for (const auto& name : preset_names("devices")) EXPECT_NO_THROW(load_device(name)) << name;
  for (const auto& name : preset_names("grids")) EXPECT_NO_THROW(load_grid(name)) << name;
  EXPECT_EQ(preset_names("devices"), (std::vector<std::string>{"a100", "cpu", "h100", "h200"}));
  try {
    load_model("wan3");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("built-in presets: cogvideox-2b"), std::string::npos);
  }
}

TEST(Geometry, ResampledFrames) {
  EXPECT_EQ(resampled_frames(81, 16, 16), 81);
  EXPECT_EQ(resampled_frames(161, 32, 16), 81);
  EXPECT_EQ(resampled_frames(128, 29.97, 16), 68);  // Taichi-HD's shortest clip
  EXPECT_EQ(resampled_frames(1, 0, 16), 1);
}

TEST(Geometry, ClipsGoToTheLargestBucketWithoutUpscaling) {
  Manifest m;
  m.load_text(
      "path,num_frames,height,width,fps\n"
      "a.mp4,300,720,1280,30\n"     // 0: 720p 16:9, 10 s -> 81 frames
      "b.mp4,128,720,1280,29.97\n"  // 1: 68 frames at 16 fps -> 65
      "c.mp4,300,480,640,30\n"      // 2: 4:3, too small for 480p's 544x720 -> 360p 416x544
      "d.jpg,1,427,640,\n"          // 3: 3:2 image -> nearest 4:3 -> 360p
      "e.mp4,300,1440,810,30\n"     // 4: portrait -> 720p 9:16
      "f.mp4,3,720,1280,30\n"       // 5: too short for any video bucket
      "g.jpg,1,100,100,\n"          // 6: too small for every tier
      "h.mp4,300,1080,1920,25\n",   // 7: 1080p -> 720p
      "m.csv", BadRowPolicy::kError);
  ModelPreset wan = load_model("wan2.1-1.3b");
  Bucketing bk = assign_buckets(m, load_grid("wan"), wan);
  auto name = [&](int row) { return bk.buckets[bk.sample_bucket[size_t(row)]].name(); };
  EXPECT_EQ(name(0), "720p-16:9-81f");
  EXPECT_EQ(name(1), "720p-16:9-65f");
  EXPECT_EQ(name(2), "360p-4:3-81f");
  EXPECT_EQ(name(3), "360p-4:3-1f");
  EXPECT_EQ(name(4), "720p-9:16-81f");
  EXPECT_EQ(name(7), "720p-16:9-81f");
  EXPECT_EQ(bk.sample_bucket[5], kNoBucket);
  EXPECT_EQ(bk.sample_bucket[6], kNoBucket);
  ASSERT_EQ(bk.unfit.size(), 2u);
  EXPECT_EQ(bk.unfit[0].row, 5);
  EXPECT_NE(bk.unfit[0].reason.find("too short"), std::string::npos);
  EXPECT_NE(bk.unfit[1].reason.find("too small"), std::string::npos);
  EXPECT_EQ(bk.usable, 6);
}

TEST(Geometry, BucketIdsDoNotDependOnRowOrder) {
  Manifest a, b;
  a.load_text("path,num_frames,height,width,fps\nx,1,480,640,\ny,300,720,1280,30\n", "a.csv",
              BadRowPolicy::kError);
  b.load_text("path,num_frames,height,width,fps\ny,300,720,1280,30\nx,1,480,640,\n", "b.csv",
              BadRowPolicy::kError);
  ModelPreset wan = load_model("wan2.1-1.3b");
  BucketGrid g = load_grid("wan");
  Bucketing ba = assign_buckets(a, g, wan), bb = assign_buckets(b, g, wan);
  ASSERT_EQ(ba.buckets.size(), bb.buckets.size());
  for (size_t i = 0; i < ba.buckets.size(); ++i)
    EXPECT_EQ(ba.buckets[i].name(), bb.buckets[i].name());
}

TEST(Cost, AttentionShareMatchesDesign) {
  // DESIGN.md: Wan 1.3B attention is ~10% of the work at 1.5K tokens and ~70% at 32.8K.
  ModelPreset wan = load_model("wan2.1-1.3b");
  auto share = [&](const Bucket& b) {
    double all = analytic_sample_flops(wan, b, false);
    // Attention core alone: 3.5 x 4 S^2 D per layer.
    double attn =
        double(wan.layers) * 3.5 * 4.0 * double(b.tokens) * double(b.tokens) * double(wan.dim);
    return attn / all;
  };
  EXPECT_NEAR(share(make_bucket(1, 480, 832, wan)), 0.10, 0.03);
  EXPECT_NEAR(share(make_bucket(81, 480, 832, wan)), 0.70, 0.05);
}
