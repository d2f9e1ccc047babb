// Issue 51, `adaptiveload scan`: an output that is the same file as the other output or as a
// file the scan reads is refused before anything is written (compared by identity: "./x",
// symbolic and hard links), and every entry that would be probed but gets no row (a dangling
// symbolic link, a FIFO, a link to a folder, an unreadable entry) has a line in the errors
// file and counts as an error. No media is needed: nothing here is probed.
#ifdef AL_HAVE_SCAN

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_paths.h"
#include "test_support.h"

using adaptiveload::test::cli_path;

namespace fs = std::filesystem;

namespace {

struct Exec {
  int code = -1;
  std::string output;  // stdout and stderr
};

class Issue51Scan : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cli_path().empty()) GTEST_SKIP() << "adaptiveload CLI not built";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("issue51_scan_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "media");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  std::string read(const std::string& name) {
    return adaptiveload::test::read_text((dir_ / name).string());
  }
  Exec scan(const std::string& args) {
    const auto r = adaptiveload::test::run_command("cd '" + dir_.string() + "' && " + cli_path() +
                                                   " scan -q " + args + " 2>&1");
    return {r.code, r.out};
  }
  fs::path dir_;
};

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

}  // namespace

TEST_F(Issue51Scan, OutAndErrorsThatAreOneFileAreRefusedBeforeWriting) {
  write("m.csv", "path,num_frames,height,width,fps\nkeep,1,2,3,\n");
  fs::create_symlink(dir_ / "m.csv", dir_ / "link.csv");
  for (const std::string& errors :
       std::vector<std::string>{"m.csv", "./m.csv", "link.csv", (dir_ / "m.csv").string()}) {
    Exec r = scan("media --out m.csv --errors " + errors);
    EXPECT_EQ(r.code, 2) << errors << ": " << r.output;
    EXPECT_TRUE(has(r.output, "--errors " + errors + " is the same file as --out m.csv"))
        << r.output;
    EXPECT_EQ(read("m.csv"), "path,num_frames,height,width,fps\nkeep,1,2,3,\n") << errors;
  }
  // Neither exists yet: the same path to be created, spelled two ways.
  Exec r = scan("media --out new.csv --errors ./new.csv");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "new.csv"));
}

TEST_F(Issue51Scan, AnOutputThatIsAScannedFileIsRefused) {
  const std::string clip = "not really a clip, but the user's file\n";
  write("media/clip.mp4", clip);
  fs::create_symlink(dir_ / "media" / "clip.mp4", dir_ / "media" / "alias.mp4");
  // A clip under a scanned folder, through ./, a symbolic link, or named on the command line.
  for (const std::string args :
       {"media --out media/clip.mp4", "media --out ./media/clip.mp4", "media --out media/alias.mp4",
        "media --out m.csv --errors media/clip.mp4", "media/clip.mp4 --out media/alias.mp4"}) {
    Exec r = scan(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_TRUE(has(r.output, "is the same file as")) << r.output;
    EXPECT_EQ(read("media/clip.mp4"), clip) << args;
  }
  EXPECT_FALSE(fs::exists(dir_ / "m.csv"));
  // Standard output redirected to the manifest being written: refused too.
  Exec r = scan("media --out m.csv > m.csv");
  EXPECT_EQ(r.code, 2) << r.output;
}

TEST_F(Issue51Scan, EveryEntryWithoutARowHasAnErrorLine) {
  fs::create_symlink(dir_ / "gone.mp4", dir_ / "media" / "dangling.mp4");  // dangling, media name
  fs::create_symlink(dir_ / "gone.mp4", dir_ / "media" / "shard_0001");    // dangling, media target
  fs::create_symlink(dir_ / "gone.txt",
                     dir_ / "media" / "notes.txt");  // dangling, not media: no line
  ASSERT_EQ(mkfifo((dir_ / "media" / "pipe.mp4").c_str(), 0600), 0);  // a FIFO
  fs::create_directories(dir_ / "media" / "sub");
  fs::create_symlink(dir_ / "media", dir_ / "media" / "sub" / "loop");  // a folder loop
  fs::create_symlink(dir_ / "media" / "sub" / "self",
                     dir_ / "media" / "sub" / "self");  // a link to itself
  Exec r = scan("media --out m.csv");
  EXPECT_EQ(r.code, 0) << r.output;
  const std::string errors = read("m.csv.errors.csv");
  EXPECT_TRUE(has(errors, "media/dangling.mp4,dangling symbolic link")) << errors;
  EXPECT_TRUE(has(errors, "media/shard_0001,dangling symbolic link")) << errors;
  EXPECT_TRUE(has(errors, "media/pipe.mp4,not a regular file (a FIFO)")) << errors;
  EXPECT_TRUE(has(errors, "media/sub/loop,\"symbolic link to a folder, not followed")) << errors;
  EXPECT_FALSE(has(errors, "notes.txt")) << errors;
  // With --all-files every entry would be probed: the self link and the text link get lines too.
  r = scan("media --out m.csv --all-files");
  EXPECT_EQ(r.code, 0) << r.output;
  const std::string all = read("m.csv.errors.csv");
  EXPECT_TRUE(has(all, "media/notes.txt,dangling symbolic link")) << all;
  EXPECT_TRUE(has(all, "media/sub/self,cannot read: ")) << all;
  // The summary counts them.
  const auto sum = adaptiveload::test::run_command("cd '" + dir_.string() + "' && " + cli_path() +
                                                   " scan media --out m2.csv 2>/dev/null");
  EXPECT_EQ(sum.code, 0) << sum.out;
  EXPECT_TRUE(has(sum.out, "0 rows written to m2.csv, 4 errors")) << sum.out;
}

#endif  // AL_HAVE_SCAN
