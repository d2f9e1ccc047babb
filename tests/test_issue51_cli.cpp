// Issue 51 through the command-line tool: an output that is the same file as another output
// or as an input is refused before anything is written (plan, report, calibrate; scan in
// test_issue51_scan.cpp); a global batch larger than the epoch is a warning for every
// strategy; packing with groups asked for blames the option; non-UTF-8 manifests name their
// encoding; out-of-range numbers say so; each table row's warnings are under its own name;
// --sp per-sample shows balanced g=G rows; no table prints a negative zero.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "adaptiveload/util/format.h"
#include "test_paths.h"
#include "test_support.h"

using adaptiveload::test::cli_path;

namespace fs = std::filesystem;

namespace {

struct CliRun {
  int code = -1;
  std::string out, err;
};

// Runs the tool in folder `cwd` (so relative paths are the user's), stderr kept apart.
CliRun run_in(const std::string& cwd, const std::string& args) {
  static int calls = 0;
  const std::string err_file = ::testing::TempDir() + "issue51_stderr_" + std::to_string(getpid()) +
                               "_" + std::to_string(calls++) + ".txt";
  const auto res = adaptiveload::test::run_command("cd '" + cwd + "' && " + cli_path() + " " +
                                                   args + " 2>" + err_file);
  CliRun r{res.code, res.out, adaptiveload::test::read_text(err_file)};
  std::remove(err_file.c_str());
  return r;
}

// A fresh folder per test, with a small mixed manifest m.csv in it (images and clips).
class Issue51 : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("issue51_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::string m = "path,num_frames,height,width,fps\n";
    const int frames[] = {1, 33, 81, 49, 17, 1, 65, 1};
    for (int i = 0; i < 40; ++i)
      m += "s" + std::to_string(i) + (frames[i % 8] == 1 ? ".jpg," : ".mp4,") +
           std::to_string(frames[i % 8]) + (i % 3 ? ",480,832," : ",720,1280,") +
           (frames[i % 8] == 1 ? "" : "16") + "\n";
    write("m.csv", m);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  std::string read(const std::string& name) {
    return adaptiveload::test::read_text((dir_ / name).string());
  }
  CliRun run(const std::string& args) { return run_in(dir_.string(), args); }
  fs::path dir_;
};

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

}  // namespace

// --- 1. outputs that are the same file as an input or another output -------------------

TEST_F(Issue51, PlanOutThatIsTheManifestIsRefusedAndTheManifestKept) {
  const std::string before = read("m.csv");
  fs::create_symlink(dir_ / "m.csv", dir_ / "link.csv");
  fs::create_hard_link(dir_ / "m.csv", dir_ / "hard.csv");
  // By identity: the same name, ./x, an absolute path, a symbolic link, a hard link.
  for (const std::string& out : std::vector<std::string>{
           "m.csv", "./m.csv", (dir_ / "m.csv").string(), "link.csv", "hard.csv"}) {
    CliRun r = run("plan -m m.csv -s balanced --out " + out);
    EXPECT_EQ(r.code, 2) << out << ": " << r.err;
    EXPECT_TRUE(has(r.err, "--out " + out + " is the same file as the input --manifest m.csv"))
        << r.err;
    EXPECT_EQ(read("m.csv"), before) << out;
  }
  // The other way round: the manifest named through the link, --out plainly.
  CliRun r = run("plan -m ./link.csv -s balanced --out m.csv");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(read("m.csv"), before);
  // Other inputs: --profile and --fixed-config.
  write("fixed.json", "{}");
  r = run("plan -m m.csv -s balanced --fixed-config fixed.json --out ./fixed.json");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "the input --fixed-config fixed.json")) << r.err;
  EXPECT_EQ(read("fixed.json"), "{}");
  // A distinct output still plans.
  r = run("plan -m m.csv -s balanced --out plan.jsonl");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(read("plan.jsonl").empty());
}

TEST_F(Issue51, StandardOutputRedirectedToTheManifestIsSaid) {
  // The shell has emptied the manifest already: say why instead of "nothing to plan".
  CliRun r = run("plan -m m.csv --json > m.csv");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(
      r.err,
      "standard output (redirected to a file) /dev/stdout is the same file as the input --manifest "
      "m.csv"))
      << r.err;
  // Redirected elsewhere: fine.
  SetUp();  // the manifest again (the shell emptied it)
  r = run("plan -m m.csv --json -q > out.json");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(Issue51, ReportOutThatIsAnInputIsRefused) {
  const std::string before = read("m.csv");
  CliRun r = run("report -m m.csv --out ./m.csv");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "is the same file as the input --manifest m.csv")) << r.err;
  EXPECT_EQ(read("m.csv"), before);
  // The page's temporary file and --format svg's charts are outputs too.
  write("r.html.tmp", before);
  r = run("report -m r.html.tmp --out r.html");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "--out's temporary file r.html.tmp")) << r.err;
  write("r-cost.svg", before);
  r = run("report -m r-cost.svg --out r.html --format svg -q");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "--format svg's chart")) << r.err;
  EXPECT_EQ(read("r-cost.svg"), before);
  EXPECT_FALSE(fs::exists(dir_ / "r.html"));
}

TEST_F(Issue51, CalibrateOutThatIsItsMeasurementsIsRefused) {
  const std::string text = "{\"tokens\":1000,\"batch\":1,\"time_s\":0.1,\"peak_bytes\":1e9}\n";
  write("meas.jsonl", text);
  CliRun r = run("calibrate --measurements meas.jsonl --out ./meas.jsonl");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(
      has(r.err, "--out ./meas.jsonl is the same file as the input --measurements meas.jsonl"))
      << r.err;
  EXPECT_EQ(read("meas.jsonl"), text);
}

// --- 2. a global batch larger than the whole epoch --------------------------------------

TEST_F(Issue51, AGlobalBatchLargerThanTheEpochIsWarnedForEveryStrategy) {
  for (const std::string packing : {"off", "on"})
    for (const std::string batch : {"samples:1000", "tokens:1000000000"}) {
      CliRun r =
          run("plan -m m.csv -w 2 --json -q --packing " + packing + " --global-batch " + batch);
      ASSERT_EQ(r.code, 0) << r.err;
      const auto j = nlohmann::json::parse(r.out);
      ASSERT_GE(j["strategies"].size(), 3u);
      for (const auto& row : j["strategies"]) {
        const std::string name = row["name"];
        if (name.find(" g=") != std::string::npos) continue;  // comparison rows carry no warnings
        bool warned = false;
        for (const auto& w : row["warnings"])
          warned =
              warned || (has(w, "strategy '" + name + "': the global batch") &&
                         has(w, "larger than the whole epoch (40 samples)") == (batch[0] == 's'));
        EXPECT_TRUE(warned) << packing << " " << batch << " " << name << ": "
                            << row["warnings"].dump();
        EXPECT_TRUE(has(r.err, "warning: strategy '" + name + "': the global batch (" +
                                   batch.substr(0, batch.find(':'))))
            << r.err;
      }
    }
  // Within the epoch: no such warning.
  CliRun r = run("plan -m m.csv -w 2 -q --global-batch samples:40");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(has(r.err, "larger than the whole epoch")) << r.err;
}

// --- 6 and 11. packing with sequence-parallel groups -------------------------------------

TEST_F(Issue51, PackingWithGroupsAskedForBlamesTheOption) {
  for (const std::string sp : {"2", "per-sample"}) {
    CliRun r = run("plan -m m.csv -w 4 -s balanced --packing on --sp " + sp);
    EXPECT_EQ(r.code, 2) << sp << ": " << r.err;
    EXPECT_TRUE(has(r.err, "--sp " + sp + " asks for sequence-parallel groups")) << r.err;
    EXPECT_TRUE(has(r.err, "--packing off")) << r.err;
    EXPECT_FALSE(has(r.err, "they do not fit one GPU")) << r.err;
    // Comparing all: the packers are left out with the same note, no plan says "packed".
    r = run("plan -m m.csv -w 4 --packing on --sp " + sp + " --json -q");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    std::set<std::string> left;
    for (const auto& l : j["left_out"]) left.insert(l["name"].get<std::string>());
    EXPECT_TRUE(left.count("balanced")) << j["left_out"].dump();
    // greedy_pack never searches groups: under per-sample it packs on one GPU, as the bucket
    // loaders run on g=1; under --sp 2 every sample is on a group of 2, so it is refused.
    EXPECT_EQ(left.count("greedy_pack"), sp == "2" ? 1u : 0u) << j["left_out"].dump();
    r = run("plan -m m.csv -w 4 -s greedy_pack --packing on --sp " + sp + " -q");
    EXPECT_EQ(r.code, sp == "2" ? 2 : 0) << r.err;
  }
}

TEST_F(Issue51, PackingWhereSamplesNeedGroupsBlamesTheSamplesWhateverTheSpOption) {
  // A 1080p 121-frame clip on Wan 2.1 14B (wan-long grid) needs a group of 2 GPUs: with
  // --sp per-sample or --sp 2 the cause is still the samples, and --sp auto would not help.
  write("long.csv", "path,num_frames,height,width,fps\nc.mp4,121,1080,1920,16\ni.jpg,1,512,512,\n");
  for (const std::string sp : {"auto", "per-sample", "2"}) {
    CliRun r = run(
        "plan -m long.csv -w 8 --model wan2.1-14b --grid wan-long -s balanced --packing on --sp " +
        sp);
    EXPECT_EQ(r.code, 2) << sp << ": " << r.err;
    EXPECT_TRUE(has(r.err, "they do not fit one GPU")) << sp << ": " << r.err;
    EXPECT_FALSE(has(r.err, "asks for sequence-parallel groups")) << sp << ": " << r.err;
  }
}

// --- 9. each row's warnings under its own name ------------------------------------------

TEST_F(Issue51, TheBucketedRowsWarningsAreUnderItsOwnName) {
  CliRun r = run("plan -m m.csv -w 2 --json -q --packing on --global-batch samples:1000");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  bool seen = false;
  for (const auto& row : j["strategies"])
    for (const auto& w : row["warnings"]) {
      const std::string name = row["name"];
      EXPECT_EQ(w.get<std::string>().rfind("strategy '" + name + "'", 0), 0u) << name << ": " << w;
      seen = seen || name == "balanced bucketed";
    }
  EXPECT_TRUE(seen) << r.out;
  EXPECT_TRUE(has(r.err, "warning: strategy 'balanced bucketed': ")) << r.err;
  // No line twice on stderr.
  std::set<std::string> lines;
  std::istringstream ss(r.err);
  for (std::string l; std::getline(ss, l);) EXPECT_TRUE(lines.insert(l).second) << "twice: " << l;
}

// --- 13. --sp per-sample shows balanced g=G rows ----------------------------------------

TEST_F(Issue51, PerSampleGroupsShowBalancedOnEachFixedGroupSize) {
  CliRun r = run("plan -m m.csv -w 4 --sp per-sample --json -q");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::set<std::string> names;
  for (const auto& row : j["strategies"]) names.insert(row["name"].get<std::string>());
  EXPECT_TRUE(names.count("balanced g=1") && names.count("balanced g=2") &&
              names.count("balanced g=4"))
      << r.out;
  r = run("plan -m m.csv -w 4 --sp per-sample");
  EXPECT_TRUE(has(r.out, "sequence parallelism (per-sample")) << r.out;
  // --sp auto where every sample fits one GPU: no groups, no such rows.
  r = run("plan -m m.csv -w 4 --json -q");
  EXPECT_FALSE(has(r.out, " g=")) << r.out;
}

// --- 7 and 8. manifests: encodings and out-of-range numbers -----------------------------

TEST_F(Issue51, ANonUtf8ManifestNamesItsEncoding) {
  const std::string header = "path,num_frames,height,width,fps\na.jpg,1,480,640,\n";
  auto utf16 = [&](bool le, bool bom) {
    std::string out = bom ? (le ? "\xFF\xFE" : "\xFE\xFF") : "";
    for (char c : header) out += le ? std::string{c, '\0'} : std::string{'\0', c};
    return out;
  };
  auto utf32 = [&](bool le, bool bom) {
    std::string out =
        bom ? (le ? std::string("\xFF\xFE\0\0", 4) : std::string("\0\0\xFE\xFF", 4)) : "";
    for (char c : header)
      out += le ? std::string{c, '\0', '\0', '\0'} : std::string{'\0', '\0', '\0', c};
    return out;
  };
  const std::pair<std::string, std::string> cases[] = {
      {utf16(true, true), "UTF-16 LE (byte-order mark FF FE)"},
      {utf16(false, true), "UTF-16 BE (byte-order mark"},
      {utf16(true, false), "UTF-16 LE (no byte-order mark)"},
      {utf16(false, false), "UTF-16 BE (no byte-order mark)"},
      {utf32(true, true), "UTF-32 LE (byte-order mark"},
      {utf32(false, true), "UTF-32 BE (byte-order mark"},
      {utf32(true, false), "UTF-32 LE (no byte-order mark)"},
      {utf32(false, false), "UTF-32 BE (no byte-order mark)"},
      {"p\xE2th,num_frames,height,width,fps\na.jpg,1,480,640,\n", "byte 0xE2 (column 2)"},
      {"path,num_frames,height,width,fps,caf\xE9\na.jpg,1,480,640,,x\n", "Latin-1"}};
  for (const char* ext : {".csv", ".jsonl"})
    for (const auto& [text, what] : cases) {
      write(std::string("enc") + ext, text);
      CliRun r = run(std::string("plan -m enc") + ext + " -q");
      EXPECT_EQ(r.code, 1) << what << ": " << r.err;
      EXPECT_TRUE(has(r.err, what)) << r.err;
      EXPECT_TRUE(has(r.err, "iconv -f ")) << r.err;
      EXPECT_FALSE(has(r.err, "header has no")) << r.err;
    }
  // A UTF-8 byte-order mark is fine, and so are non-UTF-8 bytes in a path (file names are bytes).
  write("bom.csv", "\xEF\xBB\xBF" + header + "caf\xE9.jpg,1,480,640,\n");
  CliRun r = run("plan -m bom.csv -q");
  EXPECT_EQ(r.code, 0) << r.err;
  write("bom.jsonl",
        "\xEF\xBB\xBF{\"path\":\"a.jpg\",\"num_frames\":1,\"height\":480,\"width\":640}\n");
  r = run("plan -m bom.jsonl -q");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(Issue51, OutOfRangeNumbersAreOutOfRangeInEveryField) {
  const char* fields[] = {"num_frames", "height", "width", "fps"};
  // 1e-400 as a JSON number is read as 0 by the JSON parser ("must be positive, got 0"):
  // below as a JSON string and in CSV only.
  for (const std::string big : {"1e309", "-1e309", "1e-400"})
    for (int f = 0; f < 4; ++f) {
      std::string v[] = {"81", "480", "832", "16"};
      v[f] = big;
      write("big.csv", "path,num_frames,height,width,fps\na.mp4," + v[0] + "," + v[1] + "," + v[2] +
                           "," + v[3] + "\n");
      write("big.jsonl", "{\"path\":\"a.mp4\",\"num_frames\":" + v[0] + ",\"height\":" + v[1] +
                             ",\"width\":" + v[2] + ",\"fps\":" + v[3] + "}\n");
      write("bigs.jsonl", "{\"path\":\"a.mp4\",\"num_frames\":\"" + v[0] + "\",\"height\":\"" +
                              v[1] + "\",\"width\":\"" + v[2] + "\",\"fps\":\"" + v[3] + "\"}\n");
      for (const char* file : {"big.csv", "big.jsonl", "bigs.jsonl"}) {
        if (big == "1e-400" && std::string(file) == "big.jsonl") continue;
        CliRun r = run(std::string("plan -q -m ") + file);
        EXPECT_EQ(r.code, 1) << file << " " << fields[f] << "=" << big << ": " << r.err;
        EXPECT_TRUE(has(r.err, "out of range"))
            << file << " " << fields[f] << "=" << big << ": " << r.err;
        EXPECT_TRUE(has(r.err, fields[f])) << r.err;
        EXPECT_FALSE(has(r.err, "not a number")) << r.err;
      }
    }
}

// --- 14. the report's inputs say packing is on -----------------------------------------

TEST_F(Issue51, TheReportsInputsSayWhenPackingIsOn) {
  for (const std::string packing : {"on", "off"}) {
    CliRun r = run("report -m m.csv -w 2 -q --packing " + packing + " --out r.html");
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string html = read("r.html");
    const size_t begin = html.find("<ul class=\"inputs\">"), end = html.find("</ul>", begin);
    ASSERT_NE(begin, std::string::npos);
    EXPECT_EQ(has(html.substr(begin, end - begin), "<b>packing on</b>"), packing == "on")
        << packing;
  }
}

// --- 16. no negative zero ----------------------------------------------------------------

TEST(Issue51Format, NoNegativeZero) {
  using adaptiveload::fmt;
  EXPECT_EQ(fmt("%.1f%%", -1e-17), "0.0%");
  EXPECT_EQ(fmt("%.1f%%", -0.0), "0.0%");
  EXPECT_EQ(fmt("%.2f", -0.004), "0.00");
  EXPECT_EQ(fmt("%.1f%%", -0.05), "-0.1%");  // rounds away from zero: the sign stays
  EXPECT_EQ(fmt("%.0f", -1e300 * 1e300), "-inf");
  EXPECT_EQ(fmt("%.1f", -2.5), "-2.5");
}
