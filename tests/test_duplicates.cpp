// Rows that repeat an earlier path: found exactly, reported, kept, left out or refused.
#include <gtest/gtest.h>

#include "adaptiveload/manifest/duplicates.h"
#include "adaptiveload/util/error.h"
#include "planner_fixture.h"
#include "test_paths.h"

using adaptiveload::test::data_file;

using namespace adaptiveload;

namespace {
Manifest text(const std::string& csv, const std::string& name = "m.csv") {
  Manifest m;
  m.load_text(csv, name, BadRowPolicy::kSkip);
  return m;
}
const char* kHeader = "path,num_frames,height,width,fps\n";
}  // namespace

TEST(Duplicates, FindsEachRepeatOnceWithItsFirstRow) {
  Manifest m =
      text(std::string(kHeader) + "a.mp4,81,480,832,16\nb.jpg,1,480,640,\na.mp4,81,480,832,16\n" +
           "c.jpg,1,480,640,\nb.jpg,1,480,640,\na.mp4,17,480,832,16\n,1,4,4,\n");
  const std::vector<DuplicateRow> d = find_duplicates(m);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].row, 2);
  EXPECT_EQ(d[0].first, 0);
  EXPECT_EQ(d[1].row, 4);
  EXPECT_EQ(d[1].first, 1);
  EXPECT_EQ(d[2].row, 5);  // the same path with other numbers is the same clip
  EXPECT_EQ(d[2].first, 0);
  EXPECT_TRUE(
      find_duplicates(text(std::string(kHeader) + "a.mp4,81,480,832,16\nA.mp4,81,480,832,16\n"))
          .empty());
}

TEST(Duplicates, SkipKeepsTheFirstOfEachPathAndTheBucketingCountsThem) {
  Manifest m =
      text(std::string(kHeader) + "a.mp4,81,480,832,16\nb.jpg,1,480,640,\na.mp4,81,480,832,16\n");
  const auto d = apply_duplicate_policy(m, DuplicatePolicy::kSkip);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(m.usable(0));
  EXPECT_FALSE(m.usable(2));
  EXPECT_TRUE(m.skipped_duplicate(2));
  const Bucketing b = assign_buckets(m, load_grid("wan"), load_model("wan2.1-1.3b"));
  EXPECT_EQ(b.duplicates, 1);
  EXPECT_EQ(b.bad, 0);
  EXPECT_EQ(b.usable, 2);
  EXPECT_NE(duplicate_report(m, d, DuplicatePolicy::kSkip).find("left out"), std::string::npos);
}

TEST(Duplicates, ErrorNamesBothRowsAndWarnKeepsEveryRow) {
  Manifest m =
      text(std::string(kHeader) + "a.mp4,81,480,832,16\nb.jpg,1,480,640,\na.mp4,81,480,832,16\n");
  try {
    apply_duplicate_policy(m, DuplicatePolicy::kError);
    FAIL() << "a repeated path must be refused under kError";
  } catch (const InputError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("m.csv:4"), std::string::npos) << w;
    EXPECT_NE(w.find("repeats row 0 (m.csv:2)"), std::string::npos) << w;
    EXPECT_NE(w.find("--on-duplicate=skip"), std::string::npos) << w;
  }
  const auto d = apply_duplicate_policy(m, DuplicatePolicy::kWarn);
  EXPECT_EQ(d.size(), 1u);
  EXPECT_TRUE(m.usable(2));
  EXPECT_THROW(parse_duplicate_policy("keep"), ConfigError);
}

TEST(Duplicates, TheSameRealManifestTwiceIsReportedAsSuch) {
  Manifest m;
  m.load(data_file("coco2017_val_images.csv"), BadRowPolicy::kError);
  m.load(data_file("coco2017_val_images.csv"), BadRowPolicy::kError);
  const auto d = find_duplicates(m);
  ASSERT_EQ(d.size(), 5000u);
  for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(d[i].row, d[i].first + 5000) << i;
  const std::string r = duplicate_report(m, d, DuplicatePolicy::kWarn);
  EXPECT_NE(r.find("is the same manifest given twice?"), std::string::npos) << r;
  // The real manifests themselves have no repeated path.
  EXPECT_TRUE(find_duplicates(adaptiveload::test::real_manifest()).empty());
}
