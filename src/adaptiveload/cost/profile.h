#pragma once
// A calibrated profile (`adaptiveload calibrate`), parsed once into a value: the cost model
// (ProfileCost), the planner (its memory model, measured link and optimizer step), resume (an
// adapted cost object of a sampler state is a Profile too) and the HTML report (its calibrated
// points) all read this one value, never the file again (docs/planner.md, "Cost and memory").
#include <string>
#include <utility>
#include <vector>

#include "adaptiveload/cost/cost_model.h"

namespace adaptiveload {

struct Profile {
  std::string path;  // the file it was read from; "" for a compact cost object
  // Seconds per sample a*S + b*S^2 + c0, or (table non-empty) a measured table of (tokens,
  // seconds per sample), ascending, interpolated linearly in S.
  double a = 0, b = 0, c0 = 0;
  std::vector<std::pair<double, double>> table;
  double overhead_s = 0, half_efficiency_tokens = 0;
  double pack_sample_s = 0;  // per sample of a pack of several shapes (`calibrate --fit-packs`)
  bool has_memory = false;   // "memory": M(B, S) measured
  MemoryModel memory;
  // "step": {"optimizer_s"}: seconds of a global step beside its micro-batches; 0 without one.
  double step_s = 0;
  // "link": the ring all-reduce measured between N processes on this host (bus bytes per
  // second, latency per hop) and the gradient bytes it moved (0: not said); bus 0 = no link.
  double link_bus_bytes_per_s = 0, link_latency_s = 0, link_gradient_bytes = 0;
  bool has_link() const { return link_bus_bytes_per_s > 0; }
  // "points": the calibration's measurements as (tokens, seconds per sample = time_s / batch),
  // in file order, for the report's cost chart; empty when the file has none.
  std::vector<std::pair<double, double>> points;
};

// Reads and checks a profile file. Throws InputError naming the file (and the entry, for a
// malformed point) and what to do.
Profile load_profile(const std::string& path);
// A compact cost object {"a","b","c0","overhead_s","half_efficiency_tokens"[,"pack_sample_s"]}
// (online adaptation's refit, as stored in a sampler state: PlanState::segment_costs).
Profile profile_from_cost_json(const std::string& text);

}  // namespace adaptiveload
