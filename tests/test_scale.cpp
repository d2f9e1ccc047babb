// Scale paths: the expected-throughput M_comp search against the full search (planning and
// simulating `dual` at every candidate), the manifest's text-referencing storage and its fast
// CSV/JSONL readers against the general ones, and the fingerprint's byte stream.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "adaptiveload/util/hash.h"
#include "planner_fixture.h"
#include "test_paths.h"

using adaptiveload::test::data_dir;

using namespace adaptiveload;

namespace {

Manifest load(const std::vector<std::string>& files) {
  Manifest m;
  for (const auto& f : files) m.load(data_dir() + "/" + f, BadRowPolicy::kError);
  return m;
}

// The full search: dual planned and simulated at each candidate the planner tried.
struct Full {
  double best_c = 0, best_tp = -1, tp_at_auto = -1;
};
Full full_search(const Manifest& m, PlannerConfig cfg, const Planner& automatic) {
  Full f;
  for (const auto& [c, expected] : automatic.comp_search()) {
    (void)expected;
    cfg.comp_budget = c;
    Planner pl(m, cfg);
    const double tp = pl.simulate(pl.plan("dual")).throughput_samples_per_s;
    if (tp > f.best_tp) f.best_tp = tp, f.best_c = c;
    if (c == automatic.comp_budget()) f.tp_at_auto = tp;
  }
  return f;
}

}  // namespace

// Pools over 2^16 samples get the expected-throughput search. Tolerance: the simulated dual
// throughput at its M_comp is within 2% of the best the full search finds over the same 32
// candidates (where the throughput curve is flat the budgets themselves may differ). The
// shared manifests are repeated past 2^16 rows.
TEST(Scale, CompBudgetSearchMatchesTheFullSearch) {
  constexpr double kTolerance = 0.02;
  const std::vector<std::vector<std::string>> sets = {
      {"taichi_hd.csv"}, {"coco2017_val_images.csv"}, {"taichi_hd.csv", "coco2017_val_images.csv"}};
  struct Case {
    int W;
    const char* global_batch;
    EndPolicy end;
  };
  const Case cases[] = {{8, "auto", EndPolicy::kPad},
                        {8, "free", EndPolicy::kPad},
                        {64, "auto", EndPolicy::kPad},
                        {64, "free", EndPolicy::kPad},
                        {64, "auto", EndPolicy::kDrop}};
  double worst = 0;
  for (const auto& files : sets) {
    Manifest m;
    while (m.total_rows() < 80'000)
      for (const auto& f : files) m.load(data_dir() + "/" + f, BadRowPolicy::kError);
    for (const Case& k : cases) {
      PlannerConfig cfg;
      cfg.world_size = k.W;
      cfg.global_batch = k.global_batch;
      cfg.end_policy = k.end;
      const Planner automatic(m, cfg);
      ASSERT_GT(automatic.bucketing().usable, 1 << 16);
      ASSERT_EQ(automatic.comp_search().size(), 32u);
      const Full f = full_search(m, cfg, automatic);
      const std::string ctx = files.back() + " W=" + std::to_string(k.W) +
                              " global_batch=" + k.global_batch +
                              (k.end == EndPolicy::kPad ? " pad" : " drop");
      ASSERT_GT(f.tp_at_auto, 0) << ctx;
      const double loss = 1 - f.tp_at_auto / f.best_tp;
      worst = std::max(worst, loss);
      EXPECT_LE(loss, kTolerance) << ctx << ": M_comp " << automatic.comp_budget()
                                  << " vs full search " << f.best_c;
    }
  }
  std::printf("worst throughput loss of the expected-throughput search: %.3f%%\n", 100 * worst);
}

TEST(Scale, SmallPoolsKeepTheFullSearch) {
  const Manifest m = load({"taichi_hd.csv", "coco2017_val_images.csv"});
  for (int W : {1, 8, 64}) {
    PlannerConfig cfg;
    cfg.world_size = W;
    const Planner automatic(m, cfg);
    EXPECT_EQ(automatic.comp_budget(), full_search(m, cfg, automatic).best_c) << W;
  }
}

TEST(Scale, CompBudgetSearchCandidatesSpanTheGrid) {
  // 32 geometric candidates, ascending, each with a finite expected throughput; the pick is one.
  const Manifest m = load({"taichi_hd.csv", "coco2017_val_images.csv"});
  PlannerConfig cfg;
  cfg.world_size = 8;
  const Planner pl(m, cfg);
  ASSERT_EQ(pl.comp_search().size(), 32u);
  bool found = false;
  for (size_t i = 0; i < pl.comp_search().size(); ++i) {
    const auto [c, tp] = pl.comp_search()[i];
    EXPECT_TRUE(std::isfinite(c) && std::isfinite(tp) && tp > 0) << i;
    if (i) {
      EXPECT_GE(c, pl.comp_search()[i - 1].first) << i;
    }
    found = found || c == pl.comp_budget();
  }
  EXPECT_TRUE(found);
}

TEST(Scale, ManifestPathsReferenceTheTextOrCopiesOfIt) {
  Manifest m;
  m.load_text(
      "path,num_frames,height,width,fps\nplain/"
      "a.mp4,10,360,640,30\n\"q,uoted\"\"b.mp4\",10,360,640,30\n"
      "\n  spaced c.jpg ,1,65536,1,\n",
      "m.csv", BadRowPolicy::kError);
  m.load_text(
      "{\"path\": \"d.mp4\", \"num_frames\": 81, \"height\": 480, \"width\": 832, \"fps\": 16.5}\n"
      "{\"path\": \"e\\u00e9\\\"\", \"num_frames\": \"220.0\", \"height\": 4.8e2, \"width\": 640, "
      "\"fps\": 29.97}\n",
      "m.jsonl", BadRowPolicy::kError);
  m.add_row("f.mp4", "5", "10", "10", "24", "py", 0, BadRowPolicy::kError);
  ASSERT_EQ(m.total_rows(), 6);
  EXPECT_EQ(m.path(0), "plain/a.mp4");
  EXPECT_EQ(m.path(1), "q,uoted\"b.mp4");
  EXPECT_EQ(m.path(2), "  spaced c.jpg ");  // stored as given; only validation trims
  EXPECT_EQ(m.path(3), "d.mp4");
  EXPECT_EQ(m.path(4), "e\xC3\xA9\"");
  EXPECT_EQ(m.path(5), "f.mp4");
  EXPECT_EQ(m.where(2), "m.csv:5");  // after a blank line
  EXPECT_EQ(m.where(4), "m.jsonl:2");
  EXPECT_EQ(m.where(5), "py:0");
  EXPECT_EQ(m.clip(2).height, 65536);
  EXPECT_EQ(m.clip(2).width, 1);
  EXPECT_DOUBLE_EQ(m.clip(3).fps, 16.5);
  EXPECT_EQ(m.clip(4).num_frames, 220);
  EXPECT_EQ(m.clip(4).height, 480);
  EXPECT_DOUBLE_EQ(m.clip(4).fps, 29.97);
}

TEST(Scale, FastReadersAgreeWithTheGeneralOnes) {
  // Every line the JSONL fast path takes, also written so that only nlohmann can read it
  // (an escaped key); the CSV rows once plain and once quoted.
  const char* rows[][5] = {
      {"a.mp4", "81", "480", "832", "16"},      {"b.mp4", "81", "480", "832", "29.97"},
      {"c.mp4", "2", "1", "1", "0.001"},        {"d.mp4", "10000000", "65536", "65536", "1000"},
      {"e.mp4", "3", "7", "9", "23.976023976"}, {"f.mp4", "33", "720", "1280", "1e1"},
      {"g.jpg", "1", "427", "640", ""}};
  std::string fast = "", slow = "", csv = "path,num_frames,height,width,fps\n", quoted = csv;
  for (const auto& r : rows) {
    const std::string fps = r[4][0] ? std::string(", \"fps\": ") + r[4] : "";
    fast += std::string("{\"path\": \"") + r[0] + "\", \"num_frames\": " + r[1] +
            ", \"height\": " + r[2] + ", \"width\": " + r[3] + fps + "}\n";
    slow += std::string("{\"pa\\u0074h\": \"") + r[0] + "\", \"num_frames\": " + r[1] +
            ", \"height\": " + r[2] + ", \"width\": " + r[3] + fps + "}\n";
    csv += std::string(r[0]) + "," + r[1] + "," + r[2] + "," + r[3] + "," + r[4] + "\n";
    quoted +=
        std::string("\"") + r[0] + "\",\"" + r[1] + "\"," + r[2] + "," + r[3] + "," + r[4] + "\n";
  }
  Manifest a, b, c, d;
  a.load_text(fast, "a.jsonl", BadRowPolicy::kError);
  b.load_text(slow, "b.jsonl", BadRowPolicy::kError);
  c.load_text(csv, "c.csv", BadRowPolicy::kError);
  d.load_text(quoted, "d.csv", BadRowPolicy::kError);
  for (const Manifest* m : {&b, &c, &d}) {
    ASSERT_EQ(m->total_rows(), a.total_rows());
    for (int64_t i = 0; i < a.total_rows(); ++i) {
      EXPECT_EQ(m->path(i), a.path(i));
      EXPECT_EQ(m->clip(i).num_frames, a.clip(i).num_frames) << i;
      EXPECT_EQ(m->clip(i).height, a.clip(i).height) << i;
      EXPECT_EQ(m->clip(i).width, a.clip(i).width) << i;
      EXPECT_EQ(m->clip(i).fps, a.clip(i).fps) << i;  // bit for bit
    }
  }
  // Bad rows read by the fast path's fallback keep the general reader's messages.
  Manifest bad;
  bad.load_text(
      "{\"path\": \"x\", \"num_frames\": -0, \"height\": 1, \"width\": 1}\n"
      "{\"path\": \"x\", \"num_frames\": 1, \"num_frames\": 1, \"height\": 1, \"width\": 1}\n"
      "{\"path\": 5, \"num_frames\": 1, \"height\": 1, \"width\": 1}\n",
      "bad.jsonl", BadRowPolicy::kSkip);
  ASSERT_EQ(bad.bad_rows().size(), 3u);
  EXPECT_EQ(bad.bad_rows()[0].message(),
            "bad.jsonl:1: field 'num_frames': must be positive, got 0");
  EXPECT_EQ(bad.bad_rows()[1].field, "num_frames");
  EXPECT_NE(bad.bad_rows()[1].reason.find("appears twice"), std::string::npos);
  EXPECT_NE(bad.bad_rows()[2].reason.find("must be a string"), std::string::npos);
}

// Line ends, blanks, wide rows and both ways of reading a file: every reader gives the same
// rows, paths and line numbers (a lone CR ends a line, CRLF is one line end).
TEST(Scale, FileAccessAndLineEndsDoNotChangeTheRows) {
  std::string wide_header = "path,num_frames,height,width,fps", wide_row = "w.mp4,81,480,832,16";
  for (int k = 0; k < 66; ++k)
    wide_header += ",x" + std::to_string(k), wide_row += "," + std::to_string(k);
  const std::string csv =
      "path,num_frames,height,width,fps\r\n"
      "a.mp4,81,480,832,16\r\n"
      "b.mp4,81,480,832,29.97\r"  // lone CR: its own line end
      "\r\n"                      // then a blank line
      "\"q,uoted.mp4\",33,720,1280,25\n"
      " c.jpg ,1,427,640,\n"    // blanks kept in the path
      "d.mp4, 81 ,480,832,16";  // blanks around a number, no final LF
  // Over 64 fields a row takes the full reader; one field more than the header is a bad row.
  const std::string wide =
      wide_header + "\n" + wide_row + "\n" + wide_row + ",extra\n" + wide_row + "\n";
  const std::string jsonl =
      "{\"path\": \"a.mp4\", \"num_frames\": 81, \"height\": 480, \"width\": 832, \"fps\": 16}\r\n"
      " {\"path\": \"b.mp4\", \"num_frames\": 81, \"height\": 480, \"width\": 832} \t\r"
      "\r\n"
      "{\"path\": \"c.jpg\", \"num_frames\": 1, \"height\": 427, \"width\": 640, \"fps\": null}\r "
      "\n"
      "{\"num_frames\": \"33\", \"path\": \"d.mp4\", \"width\": 1280, \"height\": 720, \"fps\": "
      "25}";
  struct Case {
    std::string name, text;
    std::vector<int64_t> lines;  // of each row
  };
  const Case cases[] = {{"c.csv", csv, {2, 3, 5, 6, 7}},
                        {"w.csv", wide, {2, 3, 4}},
                        {"j.jsonl", jsonl, {1, 2, 4, 6}}};
  for (const Case& k : cases) {
    const std::string file = testing::TempDir() + "al_line_ends_" + k.name;
    FILE* f = fopen(file.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    fwrite(k.text.data(), 1, k.text.size(), f);
    fclose(f);
    Manifest text, copy, map;
    text.load_text(k.text, file, BadRowPolicy::kSkip);
    copy.load(file, BadRowPolicy::kSkip, FileAccess::kCopy);
    map.load(file, BadRowPolicy::kSkip, FileAccess::kMap);
    ASSERT_EQ(text.total_rows(), int64_t(k.lines.size())) << k.name;
    for (const Manifest* m : {&copy, &map}) {
      ASSERT_EQ(m->total_rows(), text.total_rows()) << k.name;
      ASSERT_EQ(m->bad_rows().size(), text.bad_rows().size()) << k.name;
      for (int64_t r = 0; r < text.total_rows(); ++r) {
        EXPECT_EQ(m->path(r), text.path(r)) << k.name << " row " << r;
        EXPECT_EQ(m->line(r), text.line(r)) << k.name << " row " << r;
        EXPECT_EQ(m->clip(r).num_frames, text.clip(r).num_frames) << k.name << " row " << r;
        EXPECT_EQ(m->clip(r).fps, text.clip(r).fps) << k.name << " row " << r;
      }
    }
    for (int64_t r = 0; r < text.total_rows(); ++r)
      EXPECT_EQ(text.line(r), k.lines[size_t(r)]) << k.name << " row " << r;
    std::remove(file.c_str());
  }
  Manifest c, w, j;
  c.load_text(csv, "c.csv", BadRowPolicy::kSkip);
  w.load_text(wide, "w.csv", BadRowPolicy::kSkip);
  j.load_text(jsonl, "j.jsonl", BadRowPolicy::kSkip);
  EXPECT_TRUE(c.bad_rows().empty());
  EXPECT_EQ(c.path(2), "q,uoted.mp4");
  EXPECT_EQ(c.path(3), " c.jpg ");
  EXPECT_EQ(c.clip(4).num_frames, 81);
  ASSERT_EQ(w.bad_rows().size(), 1u);
  EXPECT_EQ(w.bad_rows()[0].line, 3);
  EXPECT_NE(w.bad_rows()[0].reason.find("has 72 fields, the header 71"), std::string::npos)
      << w.bad_rows()[0].reason;
  EXPECT_FALSE(w.usable(1));
  EXPECT_EQ(w.path(2), "w.mp4");
  EXPECT_EQ(w.clip(2).width, 832);
  ASSERT_EQ(j.bad_rows().size(), 1u);  // b.mp4: a video without fps
  EXPECT_EQ(j.bad_rows()[0].line, 2);
  EXPECT_EQ(j.path(3), "d.mp4");
  EXPECT_EQ(j.clip(3).num_frames, 33);
}

TEST(Scale, FingerprintHashesTheSameBytesAsFieldByField) {
  // The staged hashing gives the digest of the per-field stream (states saved before keep
  // resuming): recompute the manifest part field by field and compare the planner's fingerprint
  // of two planners; a manifest differing in one path byte gets another.
  const Manifest m = load({"taichi_hd.csv", "coco2017_val_images.csv"});
  Hasher h;
  for (int64_t row = 0; row < m.total_rows(); ++row) {
    std::string_view p = m.path(row);
    h.bytes(p.data(), p.size());
    h.pod(uint8_t(0));
    const ClipInfo c = m.clip(row);
    h.pod(c.num_frames), h.pod(c.height), h.pod(c.width), h.pod(c.fps),
        h.pod(uint8_t(m.usable(row)));
  }
  const uint64_t rows_digest = h.digest();
  Hasher staged;
  std::string all;
  for (int64_t row = 0; row < m.total_rows(); ++row) {
    std::string_view p = m.path(row);
    all.append(p.data(), p.size());
    all.push_back(0);
    const ClipInfo c = m.clip(row);
    const uint8_t u = uint8_t(m.usable(row));
    all.append(reinterpret_cast<const char*>(&c.num_frames), 8)
        .append(reinterpret_cast<const char*>(&c.height), 4);
    all.append(reinterpret_cast<const char*>(&c.width), 4)
        .append(reinterpret_cast<const char*>(&c.fps), 8);
    all.append(reinterpret_cast<const char*>(&u), 1);
  }
  staged.bytes(all.data(), all.size());
  EXPECT_EQ(staged.digest(), rows_digest);

  PlannerConfig cfg;
  const Planner a(m, cfg), b(m, cfg);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  // One path byte more: another fingerprint.
  Manifest x, y;
  x.load_text("path,num_frames,height,width,fps\na.mp4,81,480,832,16\nb.jpg,1,480,640,\n", "m.csv",
              BadRowPolicy::kError);
  y.load_text("path,num_frames,height,width,fps\na.mp4,81,480,832,16\nbb.jpg,1,480,640,\n", "m.csv",
              BadRowPolicy::kError);
  EXPECT_NE(Planner(x, cfg).fingerprint(), Planner(y, cfg).fingerprint());
}
