// `adaptiveload plan --loader-profile FILE --loader-workers N`, run as a user would: the `load`
// column, the `loader` object of --json, the warning when a loader would not keep up, and
// nothing of it without the options.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_paths.h"
#include "test_support.h"

using adaptiveload::test::cli_path;
using adaptiveload::test::data_file;

namespace {

struct PlanRun {
  int code = -1;
  std::string out, err;
};

PlanRun plan(const std::string& args) {
  static int calls = 0;
  const std::string err = ::testing::TempDir() + "loader_cli_err_" + std::to_string(getpid()) +
                          "_" + std::to_string(calls++) + ".txt";
  const auto res = adaptiveload::test::run_command(cli_path() + " plan --manifest " +
                                                   data_file("taichi_hd.csv") +
                                                   " -w 4 -s balanced " + args + " 2>" + err);
  PlanRun r{res.code, res.out, adaptiveload::test::read_text(err)};
  std::remove(err.c_str());
  return r;
}

std::string profile(const std::string& name, double fixed_s) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path)
      << R"({"format": "adaptiveload-loader-1", "source": "media", "buckets": [], "fit": {"fixed_s": )"
      << fixed_s << R"(, "per_token_s": 0}})";
  return path;
}

TEST(LoaderCheckCli, SlowLoaderGivesTheColumnTheJsonAndTheWarning) {
  const std::string slow =
      profile("loader_slow.json", 100.0);  // 100 s a sample: slower than any step
  const PlanRun r = plan("--loader-profile " + slow + " --loader-workers 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("    load\n"), std::string::npos) << r.out;  // the last column's heading
  EXPECT_NE(r.out.find("x!\n"), std::string::npos) << r.out;        // balanced's cell, over 1
  EXPECT_NE(r.out.find("load: the largest ratio over steps and ranks"), std::string::npos);
  EXPECT_NE(r.err.find("warning: strategy 'balanced': the loader would not keep up: at " + slow +
                       "'s rates (decoding) with 2 worker(s) per rank"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("raise --loader-workers"), std::string::npos) << r.err;
  const PlanRun j = plan("--loader-profile " + slow + " --loader-workers 2 --json");
  ASSERT_EQ(j.code, 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  const auto& lc = doc["strategies"][0]["loader"];
  EXPECT_EQ(lc["keeps_up"], false);
  EXPECT_EQ(lc["workers"], 2);
  EXPECT_EQ(lc["slow_rank_steps"], lc["rank_steps"]);
  EXPECT_GT(lc["max_load_train_ratio"].get<double>(), 1.0);
  EXPECT_EQ(doc["inputs"]["loader_workers"], 2);
  EXPECT_EQ(doc["inputs"]["loader_profile"], slow);
}

TEST(LoaderCheckCli, FastLoaderNoWarningAndNoOptionsNothingOfIt) {
  const std::string fast = profile("loader_fast.json", 1e-9);
  const PlanRun r = plan("--loader-profile " + fast + " --loader-workers 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("    load\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("x!\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("loader would not keep up"), std::string::npos) << r.err;
  const PlanRun none = plan("");
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_EQ(none.out.find("load\n"), std::string::npos);
  EXPECT_EQ(none.out.find("load:"), std::string::npos);
  const PlanRun json = plan("--json");
  EXPECT_EQ(json.out.find("\"loader"), std::string::npos);
}

TEST(LoaderCheckCli, OptionsGoTogether) {
  const PlanRun a = plan("--loader-profile " + profile("loader_a.json", 1.0));
  EXPECT_NE(a.code, 0);
  EXPECT_NE(a.err.find("--loader-profile: needs --loader-workers N"), std::string::npos) << a.err;
  const PlanRun b = plan("--loader-workers 2");
  EXPECT_NE(b.code, 0);
  EXPECT_NE(b.err.find("--loader-workers: needs --loader-profile FILE"), std::string::npos)
      << b.err;
  const PlanRun c =
      plan("--loader-profile " + profile("loader_bad.json", -1.0) + " --loader-workers 2");
  EXPECT_NE(c.code, 0);
  EXPECT_NE(
      c.err.find("loader_bad.json: loader profile field 'fit.fixed_s' must be finite and >= 0"),
      std::string::npos)
      << c.err;
}

}  // namespace
