#include "adaptiveload/strategy/balanced/drive.h"
#include "adaptiveload/strategy/packing.h"
#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

// The built-in strategies, one line each: name, summary, planner, sync modes, traits and
// (balanced) a driver of its own (strategy.h). A new strategy is its file plus one line here.
const std::vector<StrategyEntry>& builtins() {
  static const std::vector<StrategyEntry> table = {
      {"equal_tokens", "baseline: B = floor(M_mem / S), one micro-batch per rank per step",
       plan_equal_tokens, kServesBoth, kBaseline},
      {"fixed", "per-bucket batch sizes from a config (Open-Sora bucket_config style)", plan_fixed,
       kServesBoth, kNeedsFixedBatch},
      {"dual", "the paper: B = floor(min(M_mem / S, M_comp / S^p))", plan_dual, kServesBoth},
      {"balanced",
       "ours: dual-constraint micro-batches packed so every rank does equal work per step",
       plan_balanced, kServesBoth, kMixesGroups | kPacksWhenAsked | kHoldsBatch, run_balanced},
      {"greedy_pack",
       "packing baseline: shuffle, fill each pack to the memory budget's tokens (THD packing)",
       plan_greedy_pack, kServesBoth, kPacks},
  };
  return table;
}

// The built-in ones, then the registered ones.
std::vector<StrategyEntry>& registry() {
  static std::vector<StrategyEntry> table = builtins();
  return table;
}

}  // namespace

const std::vector<StrategyEntry>& strategies() { return registry(); }

const StrategyEntry& find_strategy(const std::string& name) {
  for (const auto& s : strategies())
    if (name == s.name) return s;
  throw ConfigError("unknown strategy '" + name + "'; choose one of: " + strategy_names());
}

void register_strategy(const StrategyEntry& entry) {
  if (!entry.name || !*entry.name || !entry.fn)
    throw ConfigError("a strategy needs a name and a planner function");
  for (const auto& s : strategies())
    if (std::string(s.name) == entry.name)
      throw ConfigError("strategy '" + std::string(entry.name) + "' is already registered");
  registry().push_back(entry);
}

bool unregister_strategy(const std::string& name) {
  auto& t = registry();
  for (size_t i = builtins().size(); i < t.size(); ++i)
    if (name == t[i].name) {
      t.erase(t.begin() + long(i));
      return true;
    }
  return false;
}

std::string strategy_names(const char* sep, const char* last, bool (*only)(const StrategyEntry&)) {
  std::vector<const char*> names;
  for (const auto& s : strategies())
    if (!only || only(s)) names.push_back(s.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? last : sep) + std::string(names[i]);
  return out;
}

std::string baseline_strategy() {
  for (const auto& s : strategies())
    if (s.baseline()) return s.name;
  return "";
}

}  // namespace adaptiveload
