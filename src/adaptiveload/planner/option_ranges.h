#pragma once
// The planner's options: the one table the core's checks (Planner's constructors), the CLI's
// parsing and help (cli/plan_options.cpp), the Python sampler (_C.option_ranges(),
// python/csrc/registry_py.cpp) and the core's messages all read. A numeric option has bounds
// (0 = auto where `zero_is_auto`); a named one its choices; a text one (a file, a preset, a
// form the core parses) only its names. Each option has the CLI's flag and the sampler's
// argument: a core message names an option through option_word() (util/option_word.h, defined
// with this table), which writes it in the words of the front end that runs (the CLI's flags,
// or Python arguments).
#include <cstdint>
#include <string>
#include <vector>

#include "adaptiveload/util/option_word.h"

namespace adaptiveload {

constexpr int kMaxWorldSize = 1 << 20;
constexpr double kMaxP = 4;  // S^p of a 10^6-token sample stays far from double's range
constexpr int64_t kMaxMemBudgetTokens = 1'000'000'000'000'000;  // 1e15 tokens per micro-batch
constexpr double kMaxCompBudget = 1e300;
// Largest seconds one sample may cost, and the largest step budget: beyond it the
// scheduler's integer ticks saturate.
constexpr double kMaxSampleSeconds = 1e9;
constexpr uint64_t kMaxSeed = UINT64_MAX;  // 0 <= seed < 2^64
constexpr int64_t kMaxEpoch = INT64_MAX;   // 0 <= epoch < 2^63

struct OptionRange {
  enum class Kind : uint8_t { kInteger, kReal, kChoice, kText };
  const char* name;    // PlannerConfig's field
  const char* option;  // the CLI's flag
  Kind kind;
  const char* python = "";          // the sampler's argument ("": the field's name)
  const char* short_option = "";    // the CLI's one-letter flag, where it has one
  uint64_t int_lo = 0, int_hi = 0;  // kInteger: int_lo..int_hi (2^64 - 1 has no double)
  double lo = 0, hi = 0;            // kReal: [lo, hi], or (lo, hi] when lo_open
  bool lo_open = false;
  bool zero_is_auto = false;  // 0 (the CLI's 'auto', the sampler's None): the planner resolves it
  std::vector<std::string> choices = {};  // kChoice, in the CLI's order
  // kChoice whose Python argument is a bool: the Python literal of each choice ("True").
  std::vector<std::string> python_values = {};
};

// Every option, in the CLI's order (those with a range first).
const std::vector<OptionRange>& option_ranges();
// The entry of `name` (PlannerConfig field); throws std::out_of_range when there is none.
const OptionRange& option_range(const std::string& name);

}  // namespace adaptiveload
