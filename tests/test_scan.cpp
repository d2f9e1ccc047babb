// The media scanner and `adaptiveload scan`, on small real media generated here with the
// ffmpeg command (a few frames each): landscape and rotated mp4, webm, PNG, JPEG, and bad
// files (truncated mp4s, a text file named .mp4). Compiled only with the scanner
// (AL_HAVE_SCAN); skips when the ffmpeg command is missing.
#ifdef AL_HAVE_SCAN

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "scan/probe.h"
#include "scan/progress.h"
#include "scan/scan.h"
#include "scan/walk.h"
#include "test_paths.h"
#include "test_support.h"

using adaptiveload::test::cli_path;

namespace fs = std::filesystem;
using namespace adaptiveload;

namespace {

const std::string kCli = cli_path();

// stdout and stderr together.
struct Exec {
  int code = -1;
  std::string output;
};

Exec run(const std::string& cmd) {
  const adaptiveload::test::CommandResult r = adaptiveload::test::run_command(cmd + " 2>&1");
  return {r.code, r.out};
}

std::string read_text(const fs::path& p) { return adaptiveload::test::read_text(p.string()); }

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

// Files of the small media set and the row each must get (paths relative to the set).
const std::map<std::string, std::string> kGoodRows = {
    {"clip.webm", "7,60,80,25"}, {"flip.mov", "5,48,64,10"}, {"img.png", "1,30,40,"},
    {"land.mp4", "5,48,64,10"},  {"photo.JPG", "1,20,50,"},  {"sub/portrait.mp4", "5,64,48,10"},
};
const std::set<std::string> kBadFiles = {"notes.mp4", "trunc.mp4", "trunc_fs.mp4"};

class ScanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    have_ffmpeg_ = std::system("ffmpeg -version >/dev/null 2>&1") == 0;
    if (!have_ffmpeg_) return;
    dir_ = fs::temp_directory_path() / ("al_test_scan_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "media" / "sub");
    const std::string ff = "ffmpeg -hide_banner -loglevel error -y ";
    const std::string src = "-f lavfi -i testsrc=size=";
    const fs::path m = dir_ / "media";
    const std::vector<std::string> cmds = {
        ff + src + "64x48:rate=10 -frames:v 5 -pix_fmt yuv420p -c:v mpeg4 " + q(m / "land.mp4"),
        // Rotation as phones record it: coded landscape plus a display matrix.
        ff + "-i " + q(m / "land.mp4") + " -c copy -metadata:s:v:0 rotate=90 " +
            q(m / "sub" / "portrait.mp4"),
        ff + "-i " + q(m / "land.mp4") + " -c copy -metadata:s:v:0 rotate=180 " + q(m / "flip.mov"),
        ff + src + "80x60:rate=25 -frames:v 7 -c:v libvpx -b:v 100k " + q(m / "clip.webm"),
        ff + src + "40x30 -frames:v 1 " + q(m / "img.png"),
        ff + src + "50x20 -frames:v 1 " + q(m / "photo.JPG"),
        // Index at the front, data cut off: only the index check can tell.
        ff + src + "64x48:rate=10 -frames:v 20 -pix_fmt yuv420p -c:v mpeg4 -movflags +faststart " +
            q(dir_ / "faststart.mp4"),
    };
    for (const auto& c : cmds) ASSERT_EQ(std::system(c.c_str()), 0) << c;
    const std::string land = read_text(m / "land.mp4");
    write_text(m / "trunc.mp4", land.substr(0, land.size() / 2));  // index (moov) at the end: lost
    write_text(m / "trunc_fs.mp4", read_text(dir_ / "faststart.mp4").substr(0, 3000));
    write_text(m / "notes.mp4", "hello, world\nnot a video\n");
    write_text(m / "readme.txt", "ignored: not a media extension\n");
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (!have_ffmpeg_)
      GTEST_SKIP() << "the ffmpeg command is not installed (apt-get install ffmpeg)";
  }
  void need_cli() {
    if (kCli.empty() || !fs::exists(kCli)) GTEST_SKIP() << "adaptiveload CLI not built";
  }
  static fs::path media() { return dir_ / "media"; }

  static bool have_ffmpeg_;
  static fs::path dir_;
};
bool ScanTest::have_ffmpeg_ = false;
fs::path ScanTest::dir_;

TEST_F(ScanTest, ExtensionsConsidered) {
  for (const char* p : {"a.mp4", "b.MOV", "c.mkv", "d.webm", "e.avi", "f.m4v", "g.jpg", "h.JPEG",
                        "i.png", "j.webp", "k.bmp", "dir.x/l.Mp4"})
    EXPECT_TRUE(has_media_extension(p)) << p;
  for (const char* p : {"a.txt", "b.csv", "mp4", "c.mp4.part", "d", "e.gif"})
    EXPECT_FALSE(has_media_extension(p)) << p;
}

TEST_F(ScanTest, ProbeReadsEveryField) {
  ProbeResult land = probe_media((media() / "land.mp4").string(), false);
  ASSERT_TRUE(land.ok) << land.error;
  EXPECT_EQ(land.info.num_frames, 5);
  EXPECT_EQ(land.info.width, 64);
  EXPECT_EQ(land.info.height, 48);
  EXPECT_DOUBLE_EQ(land.info.fps, 10);
  EXPECT_FALSE(land.info.image);
  EXPECT_EQ(land.info.rotation, 0);
  EXPECT_EQ(land.info.frames_from, FrameSource::kHeader);

  // rotate=90 is stored as a display matrix that turns the picture by a quarter: the
  // display size is portrait.
  ProbeResult portrait = probe_media((media() / "sub" / "portrait.mp4").string(), false);
  ASSERT_TRUE(portrait.ok) << portrait.error;
  EXPECT_EQ(portrait.info.rotation % 180, 90);
  EXPECT_EQ(portrait.info.width, 48);
  EXPECT_EQ(portrait.info.height, 64);
  EXPECT_EQ(portrait.info.num_frames, 5);

  ProbeResult flip = probe_media((media() / "flip.mov").string(), false);
  ASSERT_TRUE(flip.ok) << flip.error;
  EXPECT_EQ(flip.info.rotation, 180);
  EXPECT_EQ(flip.info.width, 64);
  EXPECT_EQ(flip.info.height, 48);

  // Matroska has no frame count in its headers: duration x fps.
  ProbeResult webm = probe_media((media() / "clip.webm").string(), false);
  ASSERT_TRUE(webm.ok) << webm.error;
  EXPECT_EQ(webm.info.num_frames, 7);
  EXPECT_EQ(webm.info.width, 80);
  EXPECT_EQ(webm.info.height, 60);
  EXPECT_DOUBLE_EQ(webm.info.fps, 25);
  EXPECT_EQ(webm.info.frames_from, FrameSource::kDuration);

  for (auto [name, w, h] : {std::tuple{"img.png", 40, 30}, std::tuple{"photo.JPG", 50, 20}}) {
    ProbeResult img = probe_media((media() / name).string(), false);
    ASSERT_TRUE(img.ok) << name << ": " << img.error;
    EXPECT_TRUE(img.info.image) << name;
    EXPECT_EQ(img.info.num_frames, 1) << name;
    EXPECT_EQ(img.info.width, w) << name;
    EXPECT_EQ(img.info.height, h) << name;
    EXPECT_EQ(img.info.fps, 0) << name;
    EXPECT_EQ(img.info.frames_from, FrameSource::kImage) << name;
  }
}

TEST_F(ScanTest, CountFramesCountsPackets) {
  for (auto [name, frames] :
       {std::pair{"land.mp4", 5}, std::pair{"clip.webm", 7}, std::pair{"sub/portrait.mp4", 5}}) {
    ProbeResult r = probe_media((media() / name).string(), true);
    ASSERT_TRUE(r.ok) << name << ": " << r.error;
    EXPECT_EQ(r.info.num_frames, frames) << name;
    EXPECT_EQ(r.info.frames_from, FrameSource::kCounted) << name;
  }
}

TEST_F(ScanTest, BadFilesComeBackWithAReason) {
  ProbeResult cut = probe_media((media() / "trunc.mp4").string(), false);
  EXPECT_FALSE(cut.ok);
  EXPECT_NE(cut.error.find("moov atom not found"), std::string::npos) << cut.error;
  ProbeResult cut_fs = probe_media((media() / "trunc_fs.mp4").string(), false);
  EXPECT_FALSE(cut_fs.ok);
  EXPECT_NE(cut_fs.error.find("truncated"), std::string::npos) << cut_fs.error;
  EXPECT_NE(cut_fs.error.find("3000 bytes"), std::string::npos) << cut_fs.error;
  ProbeResult text = probe_media((media() / "notes.mp4").string(), false);
  EXPECT_FALSE(text.ok);
  EXPECT_FALSE(text.error.empty());
  ProbeResult missing = probe_media((dir_ / "no_such_file.mp4").string(), false);
  EXPECT_FALSE(missing.ok);
  EXPECT_NE(missing.error.find("No such file"), std::string::npos) << missing.error;
}

TEST_F(ScanTest, WalkIsSortedAndRelative) {
  WalkResult w = find_media_files({media().string()}, media().string(), false, {});
  std::vector<std::string> names;
  for (const auto& f : w.files) names.push_back(f.row_path);
  std::vector<std::string> expected;
  for (const auto& [k, v] : kGoodRows) expected.push_back(k);
  for (const auto& k : kBadFiles) expected.push_back(k);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);
  EXPECT_TRUE(w.errors.empty());
  // The same folder named twice, and a file inside it: each file once.
  WalkResult twice =
      find_media_files({media().string(), media().string(), (media() / "land.mp4").string()},
                       media().string(), false, {});
  EXPECT_EQ(twice.files.size(), expected.size());
}

TEST_F(ScanTest, CliWritesManifestAndErrors) {
  need_cli();
  const fs::path out = dir_ / "cli.csv";
  Exec r = run(kCli + " scan " + q(media()) + " --root " + q(media()) + " -o " + q(out) + " -j 3");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string expected = "path,num_frames,height,width,fps\n";
  for (const auto& [path, row] : kGoodRows) expected += path + "," + row + "\n";
  EXPECT_EQ(read_text(out), expected);

  const std::vector<std::string> err = lines_of(read_text(dir_ / "cli.csv.errors.csv"));
  ASSERT_EQ(err.size(), 1 + kBadFiles.size());
  EXPECT_EQ(err[0], "path,reason");
  std::set<std::string> bad;
  for (size_t i = 1; i < err.size(); ++i) {
    const std::string path = err[i].substr(0, err[i].find(','));
    bad.insert(path);
    EXPECT_GT(err[i].size(), path.size() + 10) << "reason missing: " << err[i];
  }
  EXPECT_EQ(bad, kBadFiles);
  EXPECT_NE(r.output.find("9 files found"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("6 rows written"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 errors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("files/s"), std::string::npos) << r.output;
}

TEST_F(ScanTest, PathsJoinTheFolderAsGiven) {
  need_cli();
  const fs::path out = dir_ / "asgiven.csv";
  Exec r = run("cd " + q(dir_) + " && " + kCli + " scan media -o " + q(out) + " --errors " +
               q(dir_ / "e.csv") + " -q");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(r.output.empty()) << "--quiet printed: " << r.output;
  const std::vector<std::string> rows = lines_of(read_text(out));
  ASSERT_EQ(rows.size(), 1 + kGoodRows.size());
  EXPECT_EQ(rows[1], "media/clip.webm,7,60,80,25");
  EXPECT_EQ(rows.back(), "media/sub/portrait.mp4,5,64,48,10");
}

TEST_F(ScanTest, AllFilesProbesEveryFile) {
  need_cli();
  const fs::path out = dir_ / "all.csv";
  Exec r = run(kCli + " scan " + q(media()) + " --root " + q(media()) + " -o " + q(out) +
               " --all-files -q");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(lines_of(read_text(out)).size(), 1 + kGoodRows.size());
  const std::string err = read_text(dir_ / "all.csv.errors.csv");
  EXPECT_NE(err.find("readme.txt,"), std::string::npos) << err;
}

TEST_F(ScanTest, AppendKeepsRowsAndSkipsKnownFiles) {
  need_cli();
  const fs::path out = dir_ / "append.csv";
  // Rows from an earlier run (one by hand, out of order), and the half row an interrupted
  // write would leave.
  const std::string kept =
      "path,num_frames,height,width,fps\nland.mp4,5,48,64,10\nelsewhere/x.mp4,10,480,640,30\n";
  write_text(out, kept + "img.png,1,3");
  Exec r =
      run(kCli + " scan " + q(media()) + " --root " + q(media()) + " -o " + q(out) + " --append");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string expected = kept;
  for (const auto& [path, row] : kGoodRows)
    if (path != "land.mp4") expected += path + "," + row + "\n";
  EXPECT_EQ(read_text(out), expected);
  EXPECT_NE(r.output.find("1 already in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("5 rows written"), std::string::npos) << r.output;
  // Nothing left to do: a second append adds nothing and keeps the file as it is.
  r = run(kCli + " scan " + q(media()) + " --root " + q(media()) + " -o " + q(out) + " --append");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_text(out), expected);
  EXPECT_NE(r.output.find("0 rows written"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 errors"), std::string::npos)
      << "bad files are probed again: " << r.output;
}

TEST_F(ScanTest, AppendRefusesANonManifest) {
  need_cli();
  const fs::path out = dir_ / "notmanifest.csv";
  write_text(out, "a,b,c\n1,2,3\n");
  Exec r = run(kCli + " scan " + q(media()) + " -o " + q(out) + " --append -q");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("no 'path' column"), std::string::npos) << r.output;
  EXPECT_EQ(read_text(out), "a,b,c\n1,2,3\n") << "the file must be left alone";
}

TEST_F(ScanTest, UnwritableOutputFailsBeforeProbing) {
  need_cli();
  Exec r = run(kCli + " scan " + q(media()) + " -o " + q(dir_ / "no_dir" / "m.csv"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("no_dir/m.csv"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cannot open for writing"), std::string::npos) << r.output;
  EXPECT_EQ(run(kCli + " scan " + q(dir_ / "missing_dir") + " -o " + q(dir_ / "x.csv")).code, 2);
}

TEST_F(ScanTest, ProgressLineSaysDoneTotalRateAndEta) {
  const std::string l = ProgressBar::line({50, 100, 2.0}, 10);
  EXPECT_NE(l.find("[#####.....]"), std::string::npos) << l;
  EXPECT_NE(l.find("50/100 files"), std::string::npos) << l;
  EXPECT_NE(l.find("50%"), std::string::npos) << l;
  EXPECT_NE(l.find("25.0 files/s"), std::string::npos) << l;
  EXPECT_NE(l.find("ETA 0:02"), std::string::npos) << l;
  // Not a terminal: an enabled bar stays silent.
  FILE* f = std::tmpfile();
  ProgressBar bar(f, true);
  EXPECT_FALSE(bar.active());
  bar.update({1, 2, 1.0});
  bar.finish();
  EXPECT_EQ(std::ftell(f), 0);
  std::fclose(f);
}

TEST_F(ScanTest, ProgressBarOnlyOnATerminal) {
  need_cli();
  if (std::system("script --version >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "util-linux 'script' not installed";
  const std::string cmd = kCli + " scan " + q(media()) + " -o " + q(dir_ / "tty.csv");
  // Under a pseudo-terminal (script -qfec runs the command with a TTY on stdin/out/err).
  Exec tty = run("script -qfec \"" + cmd + "\" /dev/null");
  ASSERT_EQ(tty.code, 0) << tty.output;
  EXPECT_NE(tty.output.find("ETA"), std::string::npos) << tty.output;
  EXPECT_NE(tty.output.find("9/9 files"), std::string::npos) << tty.output;
  // A pipe: the summary only.
  Exec pipe = run(cmd + " | cat");
  ASSERT_EQ(pipe.code, 0) << pipe.output;
  EXPECT_EQ(pipe.output.find("ETA"), std::string::npos) << pipe.output;
  EXPECT_NE(pipe.output.find("rows written"), std::string::npos) << pipe.output;
  // --quiet on a terminal: nothing at all.
  Exec quiet = run("script -qfec \"" + cmd + " --quiet\" /dev/null");
  EXPECT_EQ(quiet.output.find("ETA"), std::string::npos) << quiet.output;
}

// 1,000 good files (copies of the small set under new names) and 40 bad ones: every good
// file gets its row, every bad one an error line; an interrupted scan leaves whole rows and
// --append finishes it to the same file as an uninterrupted scan.
TEST_F(ScanTest, ThousandFiles) {
  need_cli();
  const fs::path big = dir_ / "big";
  fs::create_directories(big / "a" / "b");
  std::map<std::string, std::string> good;  // row path -> expected row
  std::vector<std::string> templates;
  for (const auto& [path, row] : kGoodRows) templates.push_back(path);
  for (int i = 0; i < 1000; ++i) {
    const std::string& t = templates[size_t(i) % templates.size()];
    const fs::path src = media() / t;
    char name[64];
    std::snprintf(name, sizeof name, "%s/f%04d%s", i % 3 == 0 ? "a/b" : (i % 3 == 1 ? "a" : "."), i,
                  src.extension().string().c_str());
    fs::copy_file(src, big / name, fs::copy_options::overwrite_existing);
    good[(fs::path(name)).lexically_normal().generic_string()] = kGoodRows.at(t);
  }
  std::set<std::string> bad;
  for (int i = 0; i < 40; ++i) {
    const std::string t = *std::next(kBadFiles.begin(), i % 3);
    const std::string name = "a/bad" + std::to_string(i) + ".mp4";
    fs::copy_file(media() / t, big / name, fs::copy_options::overwrite_existing);
    bad.insert(name);
  }
  const fs::path out = dir_ / "big.csv";
  Exec r = run(kCli + " scan " + q(big) + " --root " + q(big) + " -o " + q(out));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string clean = read_text(out);
  const std::vector<std::string> rows = lines_of(clean);
  ASSERT_EQ(rows.size(), 1 + good.size());
  std::string expected = "path,num_frames,height,width,fps\n";
  for (const auto& [path, row] : good) expected += path + "," + row + "\n";
  EXPECT_EQ(clean, expected);
  const std::vector<std::string> err = lines_of(read_text(dir_ / "big.csv.errors.csv"));
  ASSERT_EQ(err.size(), 1 + bad.size());
  std::set<std::string> bad_seen;
  for (size_t i = 1; i < err.size(); ++i) bad_seen.insert(err[i].substr(0, err[i].find(',')));
  EXPECT_EQ(bad_seen, bad);
  const size_t at = r.output.find(" files/s");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string rate =
      r.output.substr(r.output.rfind(' ', at - 1) + 1, at - r.output.rfind(' ', at - 1) - 1);
  RecordProperty("files_per_s", rate);
  std::printf("[ scan     ] 1,040 files (1,000 good, 40 bad): %s files/s\n", rate.c_str());

  // Kill a scan part-way (SIGKILL: no clean-up), then resume with --append. A named pipe
  // given as an input holds the scan at a known place: opening it blocks until a writer
  // comes, so the rows sorted before it are on disk and none after it.
  const fs::path fifo = big / "f0500_fifo.mp4";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const fs::path cut = dir_ / "cut.csv";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(kCli.c_str(), kCli.c_str(), "scan", big.c_str(), fifo.c_str(), "--root", big.c_str(),
          "-o", cut.c_str(), "-q", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Everything sorted before the pipe, and nothing after it.
  std::string before = "path,num_frames,height,width,fps\n";
  for (const auto& [path, row] : good)
    if (path < "f0500_fifo.mp4") before += path + "," + row + "\n";
  std::string partial;
  for (int i = 0; i < 1000 && partial.size() < before.size(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    partial = read_text(cut);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  fs::remove(fifo);
  partial = read_text(cut);
  EXPECT_EQ(partial, before)
      << "the manifest on disk must be the sorted rows before the blocked file, all whole";
  EXPECT_LT(partial.size(), clean.size());
  std::printf(
      "[ scan     ] killed while blocked with %zu of %zu rows on disk; resuming with --append\n",
      lines_of(partial).size() - 1, good.size());
  r = run(kCli + " scan " + q(big) + " --root " + q(big) + " -o " + q(cut) + " --append -q");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_text(cut), clean);
}

}  // namespace

#endif  // AL_HAVE_SCAN
