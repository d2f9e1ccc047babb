// The caption column (`caption` or `text`) through the CSV and JSONL readers and add_row.
#include <gtest/gtest.h>

#include <string>

#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/util/error.h"

using namespace adaptiveload;

namespace {
std::string error_of(const std::string& text, const std::string& name) {
  Manifest m;
  try {
    m.load_text(text, name, BadRowPolicy::kError);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ManifestCaption, CsvCaptionOrTextColumn) {
  Manifest m;
  m.load_text(
      "fps,text,height,path,width,num_frames\n25,\"a, "
      "\"\"quoted\"\"\ncaption\",720,a.mp4,1280,100\n"
      ",plain words,480,b.jpg,640,1\n,,480,c.jpg,640,1\n",
      "m.csv", BadRowPolicy::kError);
  ASSERT_EQ(m.total_rows(), 3);
  EXPECT_TRUE(m.has_captions());
  EXPECT_EQ(m.caption(0), "a, \"quoted\"\ncaption");
  EXPECT_EQ(m.caption(1), "plain words");
  EXPECT_EQ(m.caption(2), "");
  EXPECT_EQ(m.path(0), "a.mp4");
  EXPECT_EQ(m.path(1), "b.jpg");
  EXPECT_EQ(m.line(1), 4);  // the quoted caption spans lines 2-3
  Manifest c;
  c.load_text("path,num_frames,height,width,fps,caption\nx.mp4,10,64,64,16,a dog\n", "c.csv",
              BadRowPolicy::kError);
  EXPECT_EQ(c.caption(0), "a dog");
}

TEST(ManifestCaption, AbsentColumnStoresNothing) {
  Manifest m;
  m.load_text("path,num_frames,height,width,fps\na.mp4,10,64,64,16\n", "m.csv",
              BadRowPolicy::kError);
  EXPECT_FALSE(m.has_captions());  // no side store: the manifest costs what it did
  EXPECT_EQ(m.caption(0), "");
  // A caption column whose cells are all empty stores nothing either.
  m.load_text("path,num_frames,height,width,fps,caption\nb.mp4,10,64,64,16,\n", "n.csv",
              BadRowPolicy::kError);
  EXPECT_FALSE(m.has_captions());
}

TEST(ManifestCaption, CaptionsAcrossFilesKeepRowIds) {
  Manifest m;
  m.load_text("path,num_frames,height,width,fps\na.mp4,10,64,64,16\nb.mp4,10,64,64,16\n", "1.csv",
              BadRowPolicy::kError);
  m.load_text(
      "{\"path\":\"c.jpg\",\"num_frames\":1,\"height\":64,\"width\":64,\"caption\":\"a cat\"}\n"
      "{\"path\":\"d.jpg\",\"num_frames\":1,\"height\":64,\"width\":64}\n",
      "2.jsonl", BadRowPolicy::kError);
  m.load_text("path,num_frames,height,width,fps\ne.mp4,10,64,64,16\n", "3.csv",
              BadRowPolicy::kError);
  m.add_row("f.mp4", "10", "64", "64", "16", "mem", 0, BadRowPolicy::kError, "in memory");
  ASSERT_EQ(m.total_rows(), 6);
  const char* want[] = {"", "", "a cat", "", "", "in memory"};
  const char* paths[] = {"a.mp4", "b.mp4", "c.jpg", "d.jpg", "e.mp4", "f.mp4"};
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(m.caption(r), want[r]) << r;
    EXPECT_EQ(m.path(r), paths[r]) << r;
  }
  Manifest copy = m;  // a copy keeps them
  EXPECT_EQ(copy.caption(2), "a cat");
}

TEST(ManifestCaption, JsonlFastAndFullParser) {
  Manifest m;
  m.load_text(
      "{\"path\":\"a.mp4\",\"num_frames\":10,\"height\":64,\"width\":64,\"fps\":16,\"text\":\"fast "
      "path\"}\n"
      "{\"path\":\"b.mp4\",\"num_frames\":10,\"height\":64,\"width\":64,\"fps\":16,"
      "\"caption\":\"escaped \\\"quote\\\" and caf\\u00e9\"}\n"
      "{\"path\":\"c.mp4\",\"num_frames\":10,\"height\":64,\"width\":64,\"fps\":16,\"caption\":"
      "\"na\xc3\xafve\"}\n"
      "{\"path\":\"d.mp4\",\"num_frames\":10,\"height\":64,\"width\":64,\"fps\":16,\"caption\":"
      "null}\n",
      "m.jsonl", BadRowPolicy::kError);
  ASSERT_EQ(m.total_rows(), 4);
  EXPECT_EQ(m.caption(0), "fast path");
  EXPECT_EQ(m.caption(1), "escaped \"quote\" and caf\xc3\xa9");
  EXPECT_EQ(m.caption(2), "na\xc3\xafve");
  EXPECT_EQ(m.caption(3), "");
  EXPECT_EQ(m.path(1), "b.mp4");
}

TEST(ManifestCaption, BothNamesOrAWrongTypeAreErrors) {
  std::string e =
      error_of("path,num_frames,height,width,caption,fps,text\na,1,64,64,x,,y\n", "m.csv");
  EXPECT_NE(e.find("m.csv:1: header has both 'caption' and 'text' (columns 5 and 7)"),
            std::string::npos)
      << e;
  e = error_of(
      "{\"path\":\"a\",\"num_frames\":1,\"height\":64,\"width\":64,\"caption\":\"x\",\"text\":"
      "\"y\"}\n",
      "m.jsonl");
  EXPECT_NE(e.find("m.jsonl:1: field 'caption': has both 'caption' and 'text'"), std::string::npos)
      << e;
  e = error_of("{\"path\":\"a\",\"num_frames\":1,\"height\":64,\"width\":64,\"text\":5}\n",
               "m.jsonl");
  EXPECT_NE(e.find("m.jsonl:1: field 'text': must be a string, got a number"), std::string::npos)
      << e;
  // Under the skip policy the row is bad, and the rows after it keep their captions.
  Manifest m;
  m.load_text(
      "{\"path\":\"a\",\"num_frames\":1,\"height\":64,\"width\":64,\"text\":5}\n"
      "{\"path\":\"b\",\"num_frames\":1,\"height\":64,\"width\":64,\"text\":\"ok\"}\n",
      "m.jsonl", BadRowPolicy::kSkip);
  ASSERT_EQ(m.bad_rows().size(), 1u);
  EXPECT_FALSE(m.usable(0));
  EXPECT_EQ(m.caption(0), "");
  EXPECT_EQ(m.caption(1), "ok");
}
