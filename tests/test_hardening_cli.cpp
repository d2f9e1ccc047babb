// Issue 11 through the command-line tool: numeric flags out of range and bad seeds are errors
// naming the flag, nothing to plan is an error, CR-only files plan, a strategy that drops
// samples is warned about and never ranked by speedup, and --help says what to type.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_paths.h"
#include "test_support.h"

using adaptiveload::test::bench_plan_path;
using adaptiveload::test::cli_path;
using adaptiveload::test::data_file;
using adaptiveload::test::tests_binary_dir;

namespace {

struct CliRun {
  int code = -1;
  std::string out, err;
};

CliRun run_tool(const std::string& tool, const std::string& args) {
  static int calls = 0;  // one stderr file per call: ctest runs tests in parallel processes
  const std::string err_file = ::testing::TempDir() + "hardening_stderr_" +
                               std::to_string(getpid()) + "_" + std::to_string(calls++) + ".txt";
  const auto res = adaptiveload::test::run_command(tool + " " + args + " 2>" + err_file);
  CliRun r{res.code, res.out, adaptiveload::test::read_text(err_file)};
  std::remove(err_file.c_str());
  return r;
}
CliRun run(const std::string& args) { return run_tool(cli_path(), args); }

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

const std::string kTaichi = data_file("taichi_hd.csv");

}  // namespace

TEST(HardeningCli, NumericFlagsOutOfRangeAreErrorsNamingTheFlag) {
  // The example: `plan --p 100` printed `M_comp -nan` and exited 0.
  for (const auto& [args, flag] : {std::pair{std::string("--p 100"), "--p"},
                                   {"--p nan", "--p"},
                                   {"--p inf", "--p"},
                                   {"--p -1", "--p"},
                                   {"--comp-budget nan", "--comp-budget"},
                                   {"--comp-budget 1e400", "--comp-budget"},
                                   {"--mem-budget 1e300", "--mem-budget"},
                                   {"--mem-budget 1000.5", "--mem-budget"},
                                   {"--step-budget inf", "--step-budget"},
                                   {"--step-budget 1e300", "--step-budget"}}) {
    CliRun r = run("plan -q -m " + kTaichi + " " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(std::string("error: ") + flag + ":"), std::string::npos)
        << args << ": " << r.err;
    EXPECT_EQ(r.out.find("nan"), std::string::npos) << args;
  }
  // Extreme but valid values plan with finite numbers everywhere.
  for (const char* args :
       {"--comp-budget 1e300", "--p 4", "--step-budget 1e9", "--mem-budget 1000000000000000"}) {
    CliRun r = run("plan -q --json -m " + kTaichi + " " + args);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_EQ(r.out.find("nan"), std::string::npos) << args;
    EXPECT_EQ(r.out.find("inf"), std::string::npos) << args;
    EXPECT_NO_THROW(nlohmann::json::parse(r.out)) << args;  // JSON has no NaN: it would print null
    EXPECT_EQ(r.out.find("null"), std::string::npos) << args;
  }
}

TEST(HardeningCli, SeedFollowsThePythonRules) {
  for (const char* seed :
       {"-1", "18446744073709551616", "99999999999999999999", "1e3", "0x10", "", "+1", "1.5"}) {
    CliRun r = run("plan -q -m " + kTaichi + " --seed '" + seed + "'");
    EXPECT_EQ(r.code, 2) << seed << ": " << r.out;
    EXPECT_NE(r.err.find("--seed"), std::string::npos) << seed << ": " << r.err;
  }
  CliRun r = run("plan -q --json -m " + kTaichi + " --seed 18446744073709551615");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["inputs"]["seed"].get<uint64_t>(),
            18446744073709551615ull);
  r = run("plan -q --json -m " + kTaichi + " --seed 0");
  ASSERT_EQ(r.code, 0) << r.err;
}

TEST(HardeningCli, NothingToPlanIsAnErrorAndCrOnlyFilesPlan) {
  CliRun r = run("plan -m " + write_temp("header_only.csv", "path,num_frames,height,width,fps\n"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.err.find("nothing to plan"), std::string::npos) << r.err;
  r = run("plan -m " + write_temp("empty.csv", ""));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.err.find("empty manifest"), std::string::npos) << r.err;
  const std::string out = ::testing::TempDir() + "cr_plan.jsonl";
  r = run("plan -q -s balanced -o " + out + " -m " +
          write_temp("cr_only.csv",
                     "path,num_frames,height,width,fps\ra.mp4,81,480,832,16\rb.jpg,1,480,832,\r"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 samples"), std::string::npos) << r.out;
  EXPECT_NE(adaptiveload::test::read_text(out).find("\"step\":0"), std::string::npos);
}

TEST(HardeningCli, DroppingStrategiesAreWarnedAboutAndNotRanked) {
  CliRun r = run("demo -w 1024 --end-policy drop");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: strategy 'equal_tokens' drops 8,288 of 8,288 samples (100.0%)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("it trains nothing"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("warning: strategy 'dual' drops"), std::string::npos) << r.err;
  // No strategy gets a speedup while a strategy or the baseline dropped samples.
  std::istringstream lines(r.out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    for (const char* s : {"equal_tokens ", "fixed ", "dual ", "balanced "}) {
      if (line.rfind(s, 0) != 0) continue;
      ++rows;
      EXPECT_NE(line.find(" -* "), std::string::npos) << line;
      EXPECT_EQ(line.find("x "), std::string::npos) << line;
    }
  }
  EXPECT_EQ(rows, 4);
  EXPECT_NE(r.out.find("*: samples dropped"), std::string::npos) << r.out;
  // --quiet does not silence it.
  r = run("demo -q -w 1024 --end-policy drop");
  EXPECT_NE(r.err.find("warning: strategy 'equal_tokens' drops"), std::string::npos);
  // JSON carries the dropped fraction.
  r = run("demo -q --json -w 1024 --end-policy drop");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json plan_json = nlohmann::json::parse(r.out);  // outlives the loop (a
  // range-for over a member of a temporary would read freed memory)
  for (const auto& s : plan_json["strategies"]) {
    if (s["name"] == "equal_tokens") {
      EXPECT_DOUBLE_EQ(s["dropped_fraction"].get<double>(), 1.0);
    }
  }
  // Padding (the default) drops nothing: speedups are shown, no warning.
  r = run("demo -w 1024");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("1.00x"), std::string::npos) << r.out;
}

TEST(HardeningCli, HelpListsPresetsAndTheFootnoteExplainsEveryColumn) {
  CliRun r = run("plan --help");
  ASSERT_EQ(r.code, 0);
  for (const char* name :
       {"wan2.1-1.3b", "wan2.1-14b", "hunyuanvideo", "cogvideox-2b", "cogvideox-5b", "opensora-1.2",
        "tiny-dit", "h200", "h100", "a100", "cpu", "cogvideox, mini, tiny, wan"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
  r = run("demo");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string foot = r.out.substr(r.out.find("\nimbalance:"));
  for (const char* col :
       {"imbalance:", "max-mean", "max-min", "samples/s", "tokens/s", "speedup:", "mem avg",
        "mem max", "buckets:", "steps:", "mb/rank:", "padded:", "dropped:"})
    EXPECT_NE(foot.find(col), std::string::npos) << col << " not explained in:\n" << foot;
}

TEST(HardeningCli, ModelPresetChoosesItsGrid) {
  CliRun r = run("demo -q --json --model cogvideox-5b");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["inputs"]["grid"], "cogvideox");
  EXPECT_LT(j["inputs"]["unfit"].get<int64_t>(), 200);  // was 6,612 of 8,334
  r = run("demo -q --json --model cogvideox-5b --grid wan");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["inputs"]["grid"], "wan");
}

TEST(HardeningCli, BenchPlanHelpPrintsHelp) {
  const std::string bench = bench_plan_path();
  if (bench.empty() || access(bench.c_str(), X_OK) != 0)
    GTEST_SKIP() << "bench_plan not built (AL_BUILD_BENCH=OFF)";
  for (const char* flag : {"--help", "-h"}) {
    CliRun r = run_tool(bench, flag);
    EXPECT_EQ(r.code, 0) << flag;
    EXPECT_NE(r.out.find("usage: bench_plan"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("setup s"), std::string::npos) << "ran the benchmark: " << r.out;
  }
  for (const char* bad : {"--samples", "--samples x", "--ranks 0", "--bogus 1"}) {
    CliRun r = run_tool(bench, bad);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("bench_plan: "), std::string::npos) << bad << ": " << r.err;
    EXPECT_NE(r.err.find(std::string(bad).substr(0, 5)), std::string::npos) << bad << ": " << r.err;
  }
}

TEST(HardeningCli, CtestNamesAreReadable) {
  // The ctest names gtest_discover_tests wrote: no "GetParam() = 72-byte object <01-00 ...>".
  const std::string tests =
      adaptiveload::test::read_text(tests_binary_dir() + "/adaptiveload_tests[1]_tests.cmake");
  if (tests.empty())
    GTEST_SKIP() << "tests not discovered yet (ctest discovers them after the build)";
  size_t names = 0, adaln = 0;
  for (size_t at = tests.find("add_test([=["); at != std::string::npos;
       at = tests.find("add_test([=[", at + 1)) {
    const size_t begin = at + 12, end = tests.find("]=]", begin);
    const std::string name = tests.substr(begin, end - begin);
    ++names;
    adaln += name.rfind("adaln/", 0) == 0;
    EXPECT_EQ(name.find("GetParam"), std::string::npos) << name;
    EXPECT_EQ(name.find("-byte object"), std::string::npos) << name;
    EXPECT_LT(name.size(), 160u) << name;
  }
  EXPECT_GT(names, 100u);
  EXPECT_GT(adaln, 0u);  // the parametrized adaLN cases are among them
}
