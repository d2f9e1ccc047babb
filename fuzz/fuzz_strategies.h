#pragma once
// The strategies fuzz_planner draws from: every registered one, in registry order
// (strategy/strategy_registry.cpp), so a new strategy is fuzzed with no change here.
#include <string>
#include <vector>

#include "adaptiveload/strategy/strategy.h"

namespace adaptiveload::fuzz {

inline std::vector<std::string> fuzzed_strategies() {
  std::vector<std::string> out;
  for (const StrategyEntry& s : strategies()) out.push_back(s.name);
  return out;
}

}  // namespace adaptiveload::fuzz
