#pragma once
// Ranks that are not alike (docs/planner.md, "Unequal ranks"): per rank its device (--devices,
// PlannerConfig::devices) and a stated speed factor (--rank-speed, PlannerConfig::rank_speed).
// The cost model is priced on one device, the reference: the one of least memory (the first in
// rank order among equals), whose memory every strategy's budgets come from, as a user sizes
// batches for the smallest card. Each rank's speed is its device's effective FLOP/s (peak x
// efficiency, what the analytic cost divides by) over the reference's, times its stated factor.
#include <string>
#include <vector>

#include "adaptiveload/presets/presets.h"

namespace adaptiveload {

struct RankDevices {
  std::vector<DevicePreset> device;  // per rank
  std::vector<double> speed;         // per rank, relative to the reference device
  std::vector<double> device_speed;  // per rank, its device's alone (no --rank-speed factor)
  size_t reference = 0;              // rank whose device the cost model and budgets use
  bool empty() const { return device.empty(); }
  // Bytes rank r may fill: its device's memory less its reserve.
  double usable_bytes(size_t r) const {
    return device[r].memory_bytes * (1.0 - device[r].memory_reserve_fraction);
  }
  // "8 x a100 (speed 1), 8 x h100 (speed 2.85)": runs of alike ranks in rank order.
  std::string summary() const;
};

// "h200:8,h100:8" (runs in rank order) or "h200,h200,h100,.." (a list) -> one name a rank.
// Throws ConfigError naming --devices / devices= unless it names exactly `world_size` ranks.
std::vector<std::string> parse_devices(const std::string& spec, int world_size);
// "5=0.7,12=0.9" -> per rank its stated speed factor (1 where none is stated). Throws
// ConfigError naming --rank-speed / rank_speeds= for a rank outside 0..W-1, a repeated rank,
// or a factor outside (0, 100].
std::vector<double> parse_rank_speeds(const std::string& spec, int world_size);
// The ranks of a configuration: none (empty) when neither option is given; otherwise every
// rank's device (`fallback` where --devices is not given) and speed.
RankDevices resolve_ranks(const std::string& devices, const std::string& rank_speed, int world_size,
                          const DevicePreset& fallback);

}  // namespace adaptiveload
