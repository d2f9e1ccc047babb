#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {

const std::vector<StrategyEntry>& strategies() {
  static const std::vector<StrategyEntry> table = {
      {"equal_tokens", "baseline: B = floor(M_mem / S), one micro-batch per rank per step", plan_equal_tokens},
      {"fixed", "per-bucket batch sizes from a config (Open-Sora bucket_config style)", plan_fixed},
      {"dual", "the paper: B = floor(min(M_mem / S, M_comp / S^p))", plan_dual},
      {"balanced", "ours: dual-constraint micro-batches packed so every rank does equal work per step",
       plan_balanced},
  };
  return table;
}

const StrategyEntry& find_strategy(const std::string& name) {
  std::string names;
  for (const auto& s : strategies()) {
    if (name == s.name) return s;
    names += (names.empty() ? "" : ", ") + std::string(s.name);
  }
  throw ConfigError("unknown strategy '" + name + "'; choose one of: " + names);
}

}  // namespace adaptiveload
