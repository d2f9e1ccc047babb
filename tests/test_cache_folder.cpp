// Fixed rows (a latent cache's shapes taken as their buckets) and cache folders read as
// manifests: this project's index and musubi-tuner's per-item safetensors files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "adaptiveload/geometry/geometry.h"
#include "adaptiveload/manifest/cache_folder.h"
#include "adaptiveload/plan/plan_io.h"
#include "adaptiveload/planner/planner.h"
#include "adaptiveload/presets/presets.h"
#include "adaptiveload/util/error.h"

using namespace adaptiveload;

namespace {

// A fresh folder, removed with what it holds when the test ends.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/al_cache_folder_XXXXXX";
    const char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    path = d ? d : "";
  }
  ~TempDir() {
    if (!path.empty()) std::system(("rm -rf '" + path + "'").c_str());
  }
};

std::string pad4(int v) {
  char b[16];
  std::snprintf(b, sizeof b, "%04d", v);
  return b;
}

// A safetensors file of float32 tensors (zeros) with the given names and shapes; `cut` bytes
// are left off its end (a truncated file).
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, std::vector<int>>>& tensors,
                       size_t cut = 0) {
  std::string header = "{\"__metadata__\":{\"architecture\":\"wan\",\"format_version\":\"1.0.1\"}";
  size_t off = 0;
  for (const auto& [name, shape] : tensors) {
    size_t n = 4;
    std::string dims;
    for (int d : shape) n *= size_t(d), dims += (dims.empty() ? "" : ",") + std::to_string(d);
    header += ",\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + dims + "],\"data_offsets\":[" +
              std::to_string(off) + "," + std::to_string(off + n) + "]}";
    off += n;
  }
  header += "}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  bytes += header;
  // The data (zeros) as a sparse end: only its last byte is written.
  std::ofstream f(path, std::ios::binary);
  f << bytes;
  const size_t total = bytes.size() + off - cut;
  if (total > bytes.size()) f.seekp(std::streamoff(total - 1)), f.put('\0');
}

// A musubi-tuner Wan item: latent [16, f, h, w] and its text-encoder file.
void write_musubi_item(const std::string& dir, const std::string& key, const std::string& window,
                       int frames, int height, int width, bool te = true) {
  const int f = 1 + (frames - 1) / 4, h = height / 8, w = width / 8;
  const std::string lat_key = "latents_" + std::to_string(f) + "x" + std::to_string(h) + "x" +
                              std::to_string(w) + "_float32";
  // The name carries the item's size before bucketing (here a larger original).
  const std::string name = key + (window.empty() ? "" : "_" + window) + "_" + pad4(width + 40) +
                           "x" + pad4(height + 24) + "_wan.safetensors";
  write_safetensors(dir + "/" + name, {{lat_key, {16, f, h, w}}});
  if (te)
    write_safetensors(dir + "/" + key + "_wan_te.safetensors", {{"varlen_t5_float32", {7, 32}}});
}

PlannerConfig wan_config() {
  PlannerConfig c;
  c.model = "wan2.1-1.3b";
  c.grid = "wan";
  c.world_size = 4;
  return c;
}

}  // namespace

TEST(FixedRows, TakeTheirOwnShapeAsBucket) {
  const ModelPreset wan = load_model("wan2.1-1.3b");
  const BucketGrid grid = load_grid("wan");
  Manifest m;
  m.load_text(
      "path,num_frames,height,width,fps\n"
      "a.mp4,81,480,832,16\n"  // 0: not fixed, the grid's 480p 16:9 81f
      "c0,81,480,832,30\n"     // 1: fixed at the same shape (fps is not used: no resampling)
      "c1,45,496,832,16\n"     // 2: fixed at a shape the grid does not list
      "c2,1,480,832,\n"        // 3: fixed image, the grid's
      "c3,81,480,840,16\n"     // 4: fixed, 840 is not a multiple of 16: unfit
      "c4,80,480,832,16\n",    // 5: fixed, 80 frames is not 4k+1: unfit
      "m.csv", BadRowPolicy::kError);
  EXPECT_FALSE(m.any_fixed());
  m.mark_fixed(1, 6);
  EXPECT_TRUE(m.any_fixed());
  EXPECT_FALSE(m.fixed(0));
  EXPECT_TRUE(m.fixed(1));
  EXPECT_TRUE(m.fixed(5));
  const Bucketing b = assign_buckets(m, grid, wan);
  ASSERT_NE(b.sample_bucket[0], kNoBucket);
  EXPECT_EQ(b.sample_bucket[1], b.sample_bucket[0]);
  const Bucket& own = b.buckets[b.sample_bucket[2]];
  EXPECT_EQ(own.name(), "fixed-496x832-45f");
  EXPECT_EQ(own.tokens, 12 * 31 * 52);
  EXPECT_EQ(b.sample_bucket[2], b.buckets.size() - 1);  // after the grid's buckets
  EXPECT_EQ(b.buckets[b.sample_bucket[3]].name(), "480p-16:9-1f");
  EXPECT_EQ(b.sample_bucket[4], kNoBucket);
  EXPECT_EQ(b.sample_bucket[5], kNoBucket);
  ASSERT_EQ(b.unfit.size(), 2u);
  EXPECT_NE(b.unfit[0].reason.find("480x840 is not a multiple of the model's 16x16"),
            std::string::npos);
  EXPECT_NE(b.unfit[1].reason.find("80 frames is not 1 + a multiple"), std::string::npos);
  const auto lat = latent_shape(own, wan);
  EXPECT_EQ(lat, (std::array<int64_t, 4>{16, 12, 62, 104}));
}

TEST(FixedRows, WithoutFixedRowsBucketsAndFingerprintAreUnchanged) {
  Manifest a, b;
  const char* text = "path,num_frames,height,width,fps\nx.mp4,81,480,832,16\ny.jpg,1,720,1280,\n";
  a.load_text(text, "m.csv", BadRowPolicy::kError);
  b.load_text(text, "m.csv", BadRowPolicy::kError);
  b.mark_fixed(0, 2);  // the same shapes, fixed: same buckets, but not the same manifest
  Planner pa(a, wan_config()), pb(b, wan_config());
  EXPECT_EQ(pa.bucketing().sample_bucket, pb.bucketing().sample_bucket);
  EXPECT_NE(pa.fingerprint(), pb.fingerprint());
}

TEST(MusubiCache, ParsesItsFileNames) {
  MusubiName n;
  ASSERT_TRUE(parse_musubi_name("cat_photo_1024x0768_wan.safetensors", n));
  EXPECT_EQ(n.item_key, "cat_photo");
  EXPECT_EQ(n.frames, 0);
  EXPECT_EQ(n.width, 1024);
  EXPECT_EQ(n.height, 768);
  EXPECT_EQ(n.arch, "wan");
  ASSERT_TRUE(parse_musubi_name("clip_7_00016-081_1280x0720_wan.safetensors", n));
  EXPECT_EQ(n.item_key, "clip_7");
  EXPECT_EQ(n.frame_start, 16);
  EXPECT_EQ(n.frames, 81);
  ASSERT_TRUE(
      parse_musubi_name("clip_00000-045-01_0832x0480_wan.safetensors", n));  // a section index
  EXPECT_EQ(n.item_key, "clip");
  EXPECT_EQ(n.frames, 45);
  EXPECT_FALSE(parse_musubi_name("clip_wan_te.safetensors", n));
  EXPECT_FALSE(parse_musubi_name("notes.txt", n));
  EXPECT_FALSE(parse_musubi_name("x_wan.safetensors", n));
}

TEST(MusubiCache, FolderPlansLikeTheEquivalentManifest) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  write_musubi_item(dir, "img_a", "", 1, 480, 832);
  write_musubi_item(dir, "clip_b", "00000-081", 81, 480, 832);
  write_musubi_item(dir, "clip_b", "00081-045", 45, 480, 832);  // same item, second window
  write_musubi_item(dir, "clip_c", "00000-033", 33, 720, 1280);
  write_musubi_item(dir, "img_d", "", 1, 496, 496);  // a size the grid does not list
  Manifest m;
  m.load(dir, BadRowPolicy::kError);
  ASSERT_EQ(m.total_rows(), 5);
  EXPECT_TRUE(m.fixed(0) && m.fixed(4));
  // Rows in byte order of the latent files' names; the equivalent manifest lists the same
  // shapes (at the grid's 16 fps, so that its clips resample to exactly those frames).
  Manifest eq;
  eq.load_text(
      "path,num_frames,height,width,fps\n"
      "b1,81,480,832,16\nb2,45,480,832,16\nc,33,720,1280,16\na,1,480,832,\nd,1,496,496,\n",
      "eq.csv", BadRowPolicy::kError);
  EXPECT_EQ(std::string(m.path(0)), dir + "/clip_b_00000-081_0872x0504_wan.safetensors");
  for (int64_t r = 0; r < 5; ++r) {
    EXPECT_EQ(m.clip(r).num_frames, eq.clip(r).num_frames) << r;
    EXPECT_EQ(m.clip(r).height, eq.clip(r).height) << r;
    EXPECT_EQ(m.clip(r).width, eq.clip(r).width) << r;
  }
  // d (496x496) is not in the grid: the manifest's row goes to a smaller bucket, the cache's
  // keeps its shape. Without it, the plans are equal.
  Manifest m4, eq4;
  eq4.load_text(
      "path,num_frames,height,width,fps\nb1,81,480,832,16\nb2,45,480,832,16\nc,33,720,1280,16\na,1,"
      "480,832,\n",
      "eq.csv", BadRowPolicy::kError);
  std::remove((dir + "/img_d_0536x0520_wan.safetensors").c_str());
  m4.load(dir, BadRowPolicy::kError);
  ASSERT_EQ(m4.total_rows(), 4);
  Planner pm(m4, wan_config()), pe(eq4, wan_config());
  for (const char* s : {"balanced", "equal_tokens"}) {
    std::ostringstream a, e;
    write_plan_jsonl(pm.plan(s), a);
    write_plan_jsonl(pe.plan(s), e);
    EXPECT_EQ(a.str(), e.str()) << s;
  }
  Planner pd(m, wan_config());
  EXPECT_EQ(pd.bucketing().buckets[pd.bucketing().sample_bucket[4]].name(), "fixed-496x496-1f");
}

TEST(MusubiCache, BadItemsNameTheFile) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  write_musubi_item(dir, "good", "", 1, 480, 832);
  write_musubi_item(dir, "no_te", "", 1, 480, 832, /*te=*/false);
  write_safetensors(dir + "/trunc_0832x0480_wan.safetensors",
                    {{"latents_1x60x104_float32", {16, 1, 60, 104}}}, 10);
  write_safetensors(dir + "/trunc_wan_te.safetensors", {{"varlen_t5_float32", {7, 32}}});
  write_safetensors(dir + "/wrong_00000-081_0832x0480_wan.safetensors",
                    {{"latents_1x60x104_float32", {16, 1, 60, 104}}});
  write_safetensors(dir + "/wrong_wan_te.safetensors", {{"varlen_t5_float32", {7, 32}}});
  try {
    Manifest m;
    m.load(dir, BadRowPolicy::kError);
    FAIL() << "a missing text-encoder file must be an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "no_te_0872x0504_wan.safetensors: text encoder: no text-encoder output file"),
              std::string::npos)
        << e.what();
  }
  Manifest m;
  m.load(dir, BadRowPolicy::kSkip);
  ASSERT_EQ(m.total_rows(), 4);
  ASSERT_EQ(m.bad_rows().size(), 3u);
  EXPECT_TRUE(m.usable(0));  // good
  EXPECT_NE(m.bad_rows()[1].reason.find("truncated"), std::string::npos)
      << m.bad_rows()[1].message();
  EXPECT_NE(m.bad_rows()[2].reason.find("the name's 81 frames give 21"), std::string::npos)
      << m.bad_rows()[2].message();
  EXPECT_NE(m.bad_rows()[2].file.find("wrong_00000-081"), std::string::npos);
}

TEST(MusubiCache, AFolderWithoutACacheIsRefused) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  std::ofstream(dir + "/notes.txt") << "x";
  Manifest m;
  try {
    m.load(dir, BadRowPolicy::kError);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("neither index.jsonl"), std::string::npos) << e.what();
  }
}

TEST(CacheIndex, IndexRowsAreFixed) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  std::ofstream(dir + "/index.jsonl")
      << "{\"path\":\"r0.safetensors\",\"num_frames\":45,\"height\":496,\"width\":832,\"fps\":16}\n"
         "{\"path\":\"r1.safetensors\",\"num_frames\":1,\"height\":480,\"width\":832}\n";
  Manifest m;
  m.load(dir, BadRowPolicy::kError);
  ASSERT_EQ(m.total_rows(), 2);
  EXPECT_TRUE(m.fixed(0) && m.fixed(1));
  Planner p(m, wan_config());
  EXPECT_EQ(p.bucketing().buckets[p.bucketing().sample_bucket[0]].name(), "fixed-496x832-45f");
}
