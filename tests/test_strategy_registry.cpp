// The strategy registry is the one list of strategy names: a strategy added with one
// registration is in the CLI's --strategy help and check, in `--strategy all`, in the
// fuzzer's list and in the planner, with no other list to edit (docs/planner.md, "Adding a
// strategy").
#include <gtest/gtest.h>

#include <algorithm>

#include "../fuzz/fuzz_strategies.h"
#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/error.h"
#include "planner_fixture.h"
#ifdef AL_HAVE_CLI_LIB
#include "plan_options.h"
#endif

using namespace adaptiveload;

namespace {

constexpr const char* kName = "test_half_tokens";

// A bucket loader at half the memory budget's tokens per batch: a strategy as a new file
// would hold it (strategy/equal_tokens.cpp is the model).
Plan plan_test_half_tokens(const PlanProblem& pr) {
  std::vector<int64_t> B = equal_tokens_batch_sizes(pr);
  for (int64_t& b : B) b = std::max<int64_t>(1, b / 2);
  return plan_lockstep(pr, B, kName);
}

// Registers the test strategy for one test and removes it after, so the other tests of this
// binary see the built-in registry.
struct Registered {
  Registered() {
    register_strategy({kName, "test: equal_tokens at half the batch", plan_test_half_tokens});
  }
  ~Registered() { unregister_strategy(kName); }
};

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

TEST(StrategyRegistry, BuiltInsInOrderWithTheirProperties) {
  std::vector<std::string> names;
  for (const StrategyEntry& s : strategies()) names.push_back(s.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"equal_tokens", "fixed", "dual", "balanced", "greedy_pack"}));
  EXPECT_EQ(strategy_names(), "equal_tokens, fixed, dual, balanced, greedy_pack");
  EXPECT_EQ(strategy_names(", ", " or "), "equal_tokens, fixed, dual, balanced or greedy_pack");
  EXPECT_EQ(baseline_strategy(), "equal_tokens");
  EXPECT_TRUE(find_strategy("balanced").mixes_groups());
  EXPECT_FALSE(find_strategy("dual").mixes_groups());
  EXPECT_TRUE(find_strategy("fixed").needs_fixed_batch());
  // Packing: the greedy packer always packs, balanced when asked (--packing on); the bucket
  // loaders never.
  EXPECT_TRUE(find_strategy("greedy_pack").packs());
  EXPECT_TRUE(find_strategy("balanced").packs_when_asked());
  EXPECT_FALSE(find_strategy("balanced").packs());
  for (const char* loader : {"equal_tokens", "fixed", "dual"})
    EXPECT_FALSE(find_strategy(loader).packs() || find_strategy(loader).packs_when_asked())
        << loader;
  for (const StrategyEntry& s : strategies())
    EXPECT_TRUE(s.serves(SyncMode::kStep) && s.serves(SyncMode::kMicro)) << s.name;
}

TEST(StrategyRegistry, ANameIsRegisteredOnceAndBuiltInsStay) {
  Registered r;
  EXPECT_THROW(register_strategy({kName, "again", plan_test_half_tokens}), ConfigError);
  EXPECT_THROW(register_strategy({"balanced", "again", plan_test_half_tokens}), ConfigError);
  EXPECT_FALSE(unregister_strategy("balanced"));
  EXPECT_EQ(find_strategy("balanced").fn, &plan_balanced);
}

TEST(StrategyRegistry, ARegisteredStrategyIsPlannedFuzzedAndNamedInErrors) {
  Registered r;
  EXPECT_TRUE(has(fuzz::fuzzed_strategies(), kName));
  EXPECT_EQ(fuzz::fuzzed_strategies().size(), strategies().size());
  try {
    find_strategy("nosuch");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(std::string("greedy_pack, ") + kName), std::string::npos)
        << e.what();
  }
  PlannerConfig cfg;
  cfg.world_size = 4;
  const Planner pl(test::real_manifest(), cfg);
  const Plan p = pl.plan(kName);
  EXPECT_EQ(p.strategy, kName);
  EXPECT_GT(p.num_steps(), 0u);
  EXPECT_GT(pl.simulate(p).samples, 0);
}

#ifdef AL_HAVE_CLI_LIB
TEST(StrategyRegistry, ARegisteredStrategyIsInTheCliHelpAndCheck) {
  Registered r;
  {
    CLI::App app;
    cli::PlanOptions o;
    o.add_to(app, false);
    EXPECT_NE(app.help().find(std::string("greedy_pack, ") + kName + ", or all"), std::string::npos)
        << app.help();
    app.parse(std::string("--strategy ") + kName, false);
    EXPECT_NO_THROW(o.finish());
    EXPECT_EQ(o.strategy_names(), std::vector<std::string>{kName});
  }
  {
    CLI::App app;
    cli::PlanOptions o;
    o.add_to(app, false);
    app.parse("--strategy all", false);
    o.finish();
    EXPECT_TRUE(has(o.strategy_names(), kName));
  }
  {
    CLI::App app;
    cli::PlanOptions o;
    o.add_to(app, false);
    app.parse("--strategy nosuch", false);
    try {
      o.finish();
      FAIL() << "no error";
    } catch (const CLI::ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(kName) + ", or all"), std::string::npos)
          << e.what();
    }
  }
}
#endif
