// The words a core message names an option in (util/option_word.h): the CLI's flags by
// default, the Python sampler's arguments once the binding says Python; from the one option
// table (planner/option_ranges.cpp). And no core message spells a CLI flag itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "adaptiveload/planner/option_ranges.h"
#include "adaptiveload/planner/planner.h"
#include "test_paths.h"
#include "test_support.h"

using adaptiveload::test::source_dir;

namespace fs = std::filesystem;
using namespace adaptiveload;

namespace {

// Sets the front end for one test and puts the CLI's back (the process default).
struct FrontEndScope {
  explicit FrontEndScope(FrontEnd f) { set_front_end(f); }
  ~FrontEndScope() { set_front_end(FrontEnd::kCli); }
};

TEST(OptionWords, TheCliSpellsFlagsAsItAlwaysHas) {
  ASSERT_EQ(front_end(), FrontEnd::kCli);
  EXPECT_EQ(option_word("mem_budget_tokens"), "--mem-budget");
  EXPECT_EQ(option_word("sharding", "fsdp"), "--sharding fsdp");
  EXPECT_EQ(option_word("on_duplicate", "skip", Spelling::kEquals), "--on-duplicate=skip");
  EXPECT_EQ(option_word("world_size", Spelling::kShort), "-w");
  EXPECT_EQ(option_word("sp_sizes", Spelling::kBoth), "--sp-sizes / sp_sizes");
  EXPECT_EQ(option_word("profile", "FILE"), "--profile FILE");
  EXPECT_EQ(option_word("checkpointing", "on"), "--checkpointing on");
  EXPECT_EQ(
      drop_warning("balanced", 3, 3, true),
      "strategy 'balanced' drops 3 of 3 samples (100.0%) at the epoch's end (--end-policy drop; it "
      "trains nothing); use --end-policy pad, fewer ranks (-w) or smaller batches");
  EXPECT_EQ(drop_warning("balanced", 1, 100, false), "");  // 1%: not more than kDropWarnFraction
}

TEST(OptionWords, PythonSpellsTheSamplersArguments) {
  FrontEndScope python(FrontEnd::kPython);
  EXPECT_EQ(option_word("mem_budget_tokens"), "mem_budget");
  EXPECT_EQ(option_word("mem_budget_tokens", "auto"), "mem_budget=None");
  EXPECT_EQ(option_word("sharding", "fsdp"), "sharding='fsdp'");
  EXPECT_EQ(option_word("on_duplicate", "skip", Spelling::kEquals), "on_duplicate='skip'");
  EXPECT_EQ(option_word("world_size", Spelling::kShort), "world_size");
  EXPECT_EQ(option_word("sp_sizes", Spelling::kBoth), "sp_sizes");
  EXPECT_EQ(option_word("checkpointing", "on"), "checkpointing=True");
  EXPECT_EQ(option_word("end_policy", "drop"), "drop_last=True");
  EXPECT_EQ(option_word("end_policy", "pad"), "drop_last=False");
  EXPECT_EQ(option_word("packing", "off"), "packing='off'");
  EXPECT_EQ(option_word("profile", "FILE"), "profile=<file>");
  EXPECT_EQ(option_word("comp_budget", "2.5"), "comp_budget=2.5");
  // An option the sampler does not take: the field of _C.PlannerConfig.
  EXPECT_EQ(option_word("fixed_config", "FILE"), "PlannerConfig.fixed_config=<file>");
  EXPECT_EQ(
      drop_warning("dual", 3, 3, true),
      "strategy 'dual' drops 3 of 3 samples (100.0%) at the epoch's end (drop_last=True; it trains "
      "nothing); use drop_last=False, fewer ranks (world_size) or smaller batches");
}

TEST(OptionWords, EveryOptionHasBothFrontEndsWords) {
  for (const OptionRange& r : option_ranges()) {
    EXPECT_EQ(std::string(r.option).rfind("--", 0), 0u) << r.name;
    EXPECT_EQ(option_word(r.name), r.option);
    FrontEndScope python(FrontEnd::kPython);
    EXPECT_EQ(option_word(r.name).find('-'), std::string::npos) << r.name;
  }
  EXPECT_THROW(option_word("no_such_option"), std::out_of_range);
}

// A CLI flag spelled in a string literal of the core (not in a comment): messages name options
// through option_word(), so the Python sampler's users read Python. Left out: the option
// table itself, the HTML report (the CLI's `report` alone writes it) and the commands a
// message asks the user to run (`adaptiveload calibrate --allreduce-ranks N`).
TEST(OptionWords, NoCoreMessageSpellsAFlag) {
  const std::regex flag(R"(\"[^\"]*[\s(](--?[a-z][a-z-]*)[^\"]*\")");
  const fs::path core = fs::path(source_dir()) / "src" / "adaptiveload";
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(core)) {
    const std::string rel = fs::relative(e.path(), core).string();
    if (!e.is_regular_file() || e.path().extension() != ".cpp" ||
        rel == "planner/option_ranges.cpp" || rel.rfind("report/", 0) == 0)
      continue;
    ++files;
    std::istringstream in(adaptiveload::test::read_text(e.path().string()));
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      const size_t comment = line.find("//");
      const std::string code = comment == std::string::npos ? line : line.substr(0, comment);
      std::smatch m;
      if (code.find("adaptiveload calibrate --") != std::string::npos) continue;
      // Other programs' flags in a command a message asks the user to run: iconv's (a
      // manifest's encoding error) and python's -m (the cache job that writes a cache folder).
      if (rel == "manifest/encoding.cpp" && (code.find("iconv -f") != std::string::npos ||
                                             code.find(" -t UTF-8") != std::string::npos ||
                                             code.find("-f CP1252") != std::string::npos))
        continue;
      if (code.find("python -m adaptiveload.") != std::string::npos) continue;
      EXPECT_FALSE(std::regex_search(code, m, flag))
          << rel << ":" << line_no << " spells " << m[1] << ": " << line;
    }
  }
  EXPECT_GT(files, 40);
}

}  // namespace
