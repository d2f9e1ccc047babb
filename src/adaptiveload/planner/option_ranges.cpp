#include "adaptiveload/planner/option_ranges.h"

#include <stdexcept>

#include "adaptiveload/plan/layout.h"

namespace adaptiveload {
namespace {

using K = OptionRange::Kind;
constexpr bool kAuto = true, kOpen = true;

OptionRange integer(const char* name, const char* option, uint64_t lo, uint64_t hi, bool zero_is_auto = false) {
  OptionRange r{name, option, K::kInteger};
  r.int_lo = lo, r.int_hi = hi, r.zero_is_auto = zero_is_auto;
  return r;
}

OptionRange real(const char* name, const char* option, double lo, double hi, bool lo_open, bool zero_is_auto) {
  OptionRange r{name, option, K::kReal};
  r.lo = lo, r.hi = hi, r.lo_open = lo_open, r.zero_is_auto = zero_is_auto;
  return r;
}

// --sync: auto, then every mode's name (plan/layout.h).
std::vector<std::string> sync_choices() {
  std::vector<std::string> out = {"auto"};
  for (const SyncModeName& m : kSyncModes) out.push_back(m.name);
  return out;
}

OptionRange choice(const char* name, const char* option, std::vector<std::string> choices) {
  OptionRange r{name, option, K::kChoice};
  r.choices = std::move(choices);
  return r;
}

}  // namespace

const std::vector<OptionRange>& option_ranges() {
  static const std::vector<OptionRange> table = {
      integer("world_size", "--world-size", 1, uint64_t(kMaxWorldSize)),
      integer("seed", "--seed", 0, kMaxSeed),
      integer("epoch", "--epoch", 0, uint64_t(kMaxEpoch)),
      integer("mem_budget_tokens", "--mem-budget", 1, uint64_t(kMaxMemBudgetTokens), kAuto),
      real("comp_budget", "--comp-budget", 0, kMaxCompBudget, kOpen, kAuto),
      real("p", "--p", 0, kMaxP, kOpen, kAuto),
      real("step_budget_s", "--step-budget", 0, kMaxSampleSeconds, kOpen, kAuto),
      choice("cost_model", "--cost-model", {"analytic", "power", "profile"}),
      choice("checkpointing", "--checkpointing", {"on", "off"}),
      choice("sharding", "--sharding", {"auto", "none", "fsdp"}),
      choice("sync", "--sync", sync_choices()),
      real("collective_overlap", "--overlap", 0, 1, !kOpen, !kAuto),
      choice("reshard_after_forward", "--reshard-after-forward", {"on", "off"}),
      // Each allowed sequence-parallel group size (a power of two).
      integer("sp_sizes", "--sp-sizes", 1, uint64_t(kMaxGroup)),
      choice("end_policy", "--end-policy", {"pad", "drop"}),
      choice("on_bad_row", "--on-bad-row", {"error", "skip"}),
      choice("on_duplicate", "--on-duplicate", {"warn", "skip", "error"}),
      choice("on_oversize", "--on-oversize", {"error", "skip"}),
      choice("packing", "--packing", {"off", "on"}),
  };
  return table;
}

const OptionRange& option_range(const std::string& name) {
  for (const OptionRange& r : option_ranges())
    if (name == r.name) return r;
  throw std::out_of_range("no option range '" + name + "'");
}

}  // namespace adaptiveload
