#pragma once
// Ranges of the planner's options: the one table the core's checks (Planner's constructors),
// the CLI's parsing and help (cli/plan_options.cpp) and the Python sampler
// (_C.option_ranges(), python/csrc/planner_py.cpp) all read. A numeric option has bounds
// (0 = auto where `zero_is_auto`); a named one its choices. The CLI's messages and the core's
// name the option their own way; the bounds are these.
#include <cstdint>
#include <string>
#include <vector>

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
  enum class Kind : uint8_t { kInteger, kReal, kChoice };
  const char* name;    // PlannerConfig's field, the Python sampler's argument
  const char* option;  // the CLI's flag
  Kind kind;
  uint64_t int_lo = 0, int_hi = 0;  // kInteger: int_lo..int_hi (2^64 - 1 has no double)
  double lo = 0, hi = 0;            // kReal: [lo, hi], or (lo, hi] when lo_open
  bool lo_open = false;
  bool zero_is_auto = false;  // 0 (the CLI's 'auto', the sampler's None): the planner resolves it
  std::vector<std::string> choices = {};  // kChoice, in the CLI's order
};

// Every option with a range, in the CLI's order.
const std::vector<OptionRange>& option_ranges();
// The entry of `name` (PlannerConfig field); throws std::out_of_range when there is none.
const OptionRange& option_range(const std::string& name);

}  // namespace adaptiveload
