#include <gtest/gtest.h>

#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/util/error.h"
#include "test_paths.h"

using adaptiveload::test::data_file;

using namespace adaptiveload;

namespace {
std::string error_of(const std::string& text, const std::string& name = "m.csv") {
  Manifest m;
  try {
    m.load_text(text, name, BadRowPolicy::kError);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Manifest, ReadsCsvWithColumnsInAnyOrderAndExtraColumns) {
  Manifest m;
  m.load_text(
      "fps,text,height,path,width,num_frames\n25,\"a, \"\"quoted\"\" "
      "caption\",720,a.mp4,1280,100\n,x,480,b.jpg,640,1\n",
      "m.csv", BadRowPolicy::kError);
  ASSERT_EQ(m.total_rows(), 2);
  EXPECT_EQ(m.path(0), "a.mp4");
  EXPECT_EQ(m.clip(0).num_frames, 100);
  EXPECT_EQ(m.clip(0).height, 720);
  EXPECT_EQ(m.clip(0).width, 1280);
  EXPECT_DOUBLE_EQ(m.clip(0).fps, 25);
  EXPECT_EQ(m.path(1), "b.jpg");
  EXPECT_DOUBLE_EQ(m.clip(1).fps, 0);
}

TEST(Manifest, QuotedPathsWithCommasAndNewlinesAndCrlf) {
  Manifest m;
  m.load_text(
      "path,num_frames,height,width,fps\r\n\"dir,with "
      "comma/a.mp4\",10,360,640,30\r\n\"multi\nline.mp4\",5,360,640,30\r\nc.mp4,5,360,640,30\r\n",
      "m.csv", BadRowPolicy::kError);
  ASSERT_EQ(m.total_rows(), 3);
  EXPECT_EQ(m.path(0), "dir,with comma/a.mp4");
  EXPECT_EQ(m.path(1), "multi\nline.mp4");
  EXPECT_EQ(m.where(2), "m.csv:5");  // the quoted newline takes a line
}

TEST(Manifest, FpsColumnMayBeAbsentForImageSets) {
  Manifest m;
  m.load_text("path,num_frames,height,width\na.jpg,1,480,640\n", "m.csv", BadRowPolicy::kError);
  EXPECT_EQ(m.total_rows(), 1);
  EXPECT_EQ(error_of("path,num_frames,height,width\na.mp4,50,480,640\n"),
            "m.csv:2: field 'fps': missing for a video (num_frames > 1); give the clip's frame "
            "rate (fix the row, or "
            "pass --on-bad-row=skip to skip bad rows)");
}

TEST(Manifest, BadRowsNameFileLineAndField) {
  const std::string h = "path,num_frames,height,width,fps\n";
  EXPECT_NE(error_of(h + "a,x,1,1,1\n").find("m.csv:2: field 'num_frames': 'x' is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of(h + "a,1,0,1,\n").find("m.csv:2: field 'height': must be positive"),
            std::string::npos);
  EXPECT_NE(error_of(h + "a,1,10,-4,\n").find("m.csv:2: field 'width': must be positive"),
            std::string::npos);
  EXPECT_NE(error_of(h + "a,10,10,10,abc\n").find("field 'fps': 'abc' is not a number"),
            std::string::npos);
  EXPECT_NE(error_of(h + "a,99999999999,10,10,30\n").find("implausibly large"), std::string::npos);
  EXPECT_NE(error_of(h + "a,10,100000,10,30\n").find("field 'height'"), std::string::npos);
  EXPECT_NE(error_of(h + ",10,10,10,30\n").find("field 'path': missing value"), std::string::npos);
  EXPECT_NE(error_of(h + "a,10,10\n").find("field 'width': missing value"),
            std::string::npos);  // short row
  EXPECT_NE(error_of(h + "a,10,10,10,nan\n").find("field 'fps'"), std::string::npos);
  EXPECT_NE(error_of(h + "ok,1,10,10,\nb,2.5,10,10,30\n").find("m.csv:3: field 'num_frames'"),
            std::string::npos);
  EXPECT_NE(error_of("path,frames,height,width\n").find("header has no 'num_frames' column"),
            std::string::npos);
  EXPECT_NE(error_of(h + "\"unterminated,1,1,1,\n").find("unterminated quoted field"),
            std::string::npos);
  EXPECT_NE(error_of("").find("empty manifest"), std::string::npos);
}

TEST(Manifest, SkipPolicyCountsAndKeepsRowIds) {
  Manifest m;
  m.load_text("path,num_frames,height,width,fps\na,1,10,10,\nb,zero,10,10,\nc,1,10,10,\n", "m.csv",
              BadRowPolicy::kSkip);
  ASSERT_EQ(m.total_rows(), 3);  // row ids stay the data-row index
  EXPECT_TRUE(m.usable(0));
  EXPECT_FALSE(m.usable(1));
  EXPECT_TRUE(m.usable(2));
  ASSERT_EQ(m.bad_rows().size(), 1u);
  EXPECT_EQ(m.bad_rows()[0].message(), "m.csv:3: field 'num_frames': 'zero' is not an integer");
}

TEST(Manifest, JsonlRowsNumbersOrStringsNullFps) {
  Manifest m;
  m.load_text(R"({"path":"a.mp4","num_frames":81,"height":480,"width":832,"fps":16,"text":"x"}
{"width":"640","height":"480","path":"b.jpg","num_frames":1,"fps":null}

{"path":"c.jpg","num_frames":1,"height":480,"width":640}
)",
              "m.jsonl", BadRowPolicy::kError);
  ASSERT_EQ(m.total_rows(), 3);
  EXPECT_EQ(m.clip(1).width, 640);
  EXPECT_EQ(m.where(2), "m.jsonl:4");
  Manifest bad;
  EXPECT_THROW(bad.load_text("{\"path\":\"a\",\"num_frames\":[1],\"height\":1,\"width\":1}\n",
                             "m.jsonl", BadRowPolicy::kError),
               InputError);
  Manifest skip;
  skip.load_text("{not json}\n[1,2]\n{\"path\":\"a\",\"num_frames\":1,\"height\":4,\"width\":4}\n",
                 "m.jsonl", BadRowPolicy::kSkip);
  EXPECT_EQ(skip.total_rows(), 3);
  EXPECT_EQ(skip.bad_rows().size(), 2u);
  EXPECT_TRUE(skip.usable(2));
}

TEST(Manifest, RealDatasetsLoadCompletely) {
  Manifest m;
  m.load(data_file("taichi_hd.csv"), BadRowPolicy::kError);
  m.load(data_file("coco2017_val_images.csv"), BadRowPolicy::kError);
  ASSERT_EQ(m.total_rows(), 3334 + 5000);
  EXPECT_TRUE(m.bad_rows().empty());
  EXPECT_EQ(m.files().size(), 2u);
  EXPECT_EQ(m.files()[1].first_row, 3334);
  EXPECT_EQ(m.path(0), "taichi/u6rJiF-gPx8_80_300.mp4");
  EXPECT_EQ(m.clip(0).num_frames, 220);
  EXPECT_DOUBLE_EQ(m.clip(0).fps, 29.97);
  EXPECT_EQ(m.path(3334), "coco/val2017/000000397133.jpg");
  EXPECT_EQ(m.clip(3334).height, 427);
}

TEST(Manifest, MissingFileIsAClearError) {
  Manifest m;
  try {
    m.load("/nonexistent/x.csv", BadRowPolicy::kError);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.csv: cannot open file"),
              std::string::npos);
  }
}

TEST(Manifest, CsvRowWithMoreFieldsThanTheHeaderIsABadRow) {
  // An unquoted comma in a path moves every later field: the row must not be read shifted.
  const std::string text =
      "num_frames,height,width,fps,path\n121,1080,1920,16,clips/a,b.mp4\n1,480,640,,ok.jpg\n";
  const std::string err = error_of(text);
  EXPECT_NE(err.find("m.csv:2"), std::string::npos) << err;
  EXPECT_NE(err.find("has 6 fields, the header 5"), std::string::npos) << err;
  Manifest skip;
  skip.load_text(text, "m.csv", BadRowPolicy::kSkip);
  ASSERT_EQ(skip.total_rows(), 2);
  EXPECT_FALSE(skip.usable(0));
  ASSERT_EQ(skip.bad_rows().size(), 1u);
  EXPECT_EQ(skip.bad_rows()[0].line, 2);
  EXPECT_TRUE(skip.usable(1));
  // The same row quoted is a good one; fewer fields than the header are missing values.
  Manifest ok;
  ok.load_text("num_frames,height,width,fps,path\n121,1080,1920,16,\"clips/a,b.mp4\"\n1,480,640\n",
               "m.csv", BadRowPolicy::kSkip);
  EXPECT_EQ(ok.path(0), "clips/a,b.mp4");
  EXPECT_TRUE(ok.usable(0));
  EXPECT_FALSE(ok.usable(1));  // no path
  EXPECT_EQ(ok.bad_rows().at(0).field, "path");
}

TEST(Manifest, JsonlWithAByteOrderMarkIsSniffedAsJsonl) {
  // A .txt file (no telling extension): the content decides, past a UTF-8 byte-order mark.
  Manifest m;
  m.load_text(
      "\xEF\xBB\xBF{\"path\":\"a.mp4\",\"num_frames\":81,\"height\":480,\"width\":832,\"fps\":16}"
      "\n",
      "list.txt", BadRowPolicy::kError);
  ASSERT_EQ(m.total_rows(), 1);
  EXPECT_EQ(m.path(0), "a.mp4");
  EXPECT_EQ(m.clip(0).num_frames, 81);
}
