// The repository as a user's clone has it: nothing tracked reads a path beside the checkout
// (a clone has nothing there), and the README's demo table is what the demo prints.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "test_paths.h"
#include "test_support.h"

using adaptiveload::test::cli_path;
using adaptiveload::test::data_dir;
using adaptiveload::test::source_dir;

namespace fs = std::filesystem;
using adaptiveload::test::read_text;
using adaptiveload::test::run_command;

namespace {

// Tracked files (git ls-files), or every file outside build and environment folders when the
// tree is not a git checkout (a source archive).
std::vector<std::string> repo_files() {
  std::vector<std::string> files;
  const auto git = run_command("git -C '" + source_dir() + "' ls-files 2>/dev/null");
  if (git.code == 0 && !git.out.empty()) {
    std::istringstream in(git.out);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) files.push_back(line);
    return files;
  }
  const fs::path root(source_dir());
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name.rfind("build", 0) == 0 || name == ".git" || name == ".venv" ||
                               name == ".deps" || name == "out" || name == "__pycache__")) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(fs::relative(it->path(), root).string());
  }
  return files;
}

}  // namespace

TEST(Repo, NothingTrackedReadsBesideTheCheckout) {
  // Spelled in two pieces so that this file does not match itself.
  const std::string beside = std::string("..") + "/shared";
  const std::vector<std::string> files = repo_files();
  ASSERT_GT(files.size(), 100u) << "found too few files under " << source_dir();
  std::vector<std::string> hits;
  for (const std::string& f : files) {
    const std::string text = read_text(source_dir() + "/" + f);
    if (text.find(beside) != std::string::npos) hits.push_back(f);
  }
  EXPECT_TRUE(hits.empty())
      << hits.size() << " tracked file(s) refer to " << beside
      << ", which a user's clone does not have (ship the data in data/ and read it "
         "from there); first: "
      << (hits.empty() ? "" : hits.front());
}

TEST(Repo, TheRealManifestsShipInData) {
  for (const char* f : {"taichi_hd.csv", "coco2017_val_images.csv", "SOURCES.md"})
    EXPECT_FALSE(read_text(data_dir() + "/" + f).empty()) << data_dir() << "/" << f;
}

TEST(Repo, ReadmeDemoTableIsTheDemosOutput) {
  if (cli_path().empty()) GTEST_SKIP() << "the CLI is not part of this build";
  const auto demo = run_command(cli_path() + " demo 2>/dev/null");
  ASSERT_EQ(demo.code, 0);
  // The demo's table: from its header line to the first blank line.
  const size_t at = demo.out.find("\nstrategy ");
  ASSERT_NE(at, std::string::npos) << demo.out;
  const size_t end = demo.out.find("\n\n", at + 1);
  const std::string table =
      demo.out.substr(at + 1, end == std::string::npos ? std::string::npos : end - at);
  const std::string readme = read_text(source_dir() + "/README.md");
  const std::string begin = "<!-- demo-table: begin (scripts/update_readme.sh) -->\n```\n";
  const size_t b = readme.find(begin), e = readme.find("```\n<!-- demo-table: end -->");
  ASSERT_TRUE(b != std::string::npos && e != std::string::npos && e > b)
      << "README.md lost its demo-table markers";
  EXPECT_EQ(readme.substr(b + begin.size(), e - b - begin.size()), table)
      << "README.md's demo table is not what `adaptiveload demo` prints: run "
         "scripts/update_readme.sh";
}
