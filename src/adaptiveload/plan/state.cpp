#include "adaptiveload/plan/state.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "adaptiveload/plan/layout.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {

namespace {
constexpr size_t kMaxSegments = 64;  // world-size changes within one epoch
}

const std::string& PlanState::cost_of(size_t segment) const {
  static const std::string none;
  return segment < segment_costs.size() ? segment_costs[segment] : none;
}

const std::vector<double>& PlanState::speeds_of(size_t segment) const {
  static const std::vector<double> none;
  return segment < segment_speeds.size() ? segment_speeds[segment] : none;
}

std::vector<double> canonical_speeds(const std::vector<double>& speeds) {
  bool all_one = true;
  for (double f : speeds) {
    if (!std::isfinite(f) || f <= 0 || f > 100)
      throw InputError("segment speeds",
                       "each learned speed factor must be finite and in (0, 100]");
    all_one = all_one && f == 1.0;
  }
  return all_one ? std::vector<double>{} : speeds;
}

std::string canonical_cost_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (number overflow)
    throw InputError("segment cost", std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw InputError("segment cost", "must be an object");
  nlohmann::json out = nlohmann::json::object();
  // Upper limits as a profile's (profile_cost.cpp): the cost of any bucket stays finite.
  // pack_sample_s (a fit on packs) is optional and written only when > 0, so a cost without
  // it reads and writes as before.
  struct Limit {
    const char* key;
    double hi;
    bool required;
  };
  const Limit limits[] = {{"a", 1, true},
                          {"b", 1e-3, true},
                          {"c0", 1e6, true},
                          {"overhead_s", 1e6, true},
                          {"half_efficiency_tokens", 1e12, true},
                          {"pack_sample_s", 1e6, false}};
  for (const auto& [k, hi, required] : limits) {
    if (!required && !j.contains(k)) continue;
    if (!j.contains(k) || !j[k].is_number())
      throw InputError("segment cost", std::string("needs a number '") + k + "'");
    double v = j[k].get<double>();
    if (!std::isfinite(v) || v < 0)
      throw InputError("segment cost", std::string("'") + k + "' must be finite and >= 0");
    if (v > hi) {
      char buf[80];
      snprintf(buf, sizeof buf, "' is %g, above the plausible limit %g", v, hi);
      throw InputError("segment cost", std::string("'") + k + buf);
    }
    if (required || v > 0) out[k] = v;
  }
  if (out["a"].get<double>() == 0 && out["b"].get<double>() == 0 && out["c0"].get<double>() == 0)
    throw InputError("segment cost", "a, b and c0 are all zero");
  return out.dump();
}

std::string state_to_json(const PlanState& s) {
  nlohmann::json j;
  j["format"] = "adaptiveload-state";
  j["version"] = s.version;
  j["strategy"] = s.strategy;
  // 64-bit values as hex strings: JSON readers in other languages lose bits above 2^53.
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(s.fingerprint));
  j["fingerprint"] = buf;
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(s.seed));
  j["seed"] = buf;
  j["epoch"] = s.epoch;
  if (s.sync != SyncMode::kStep)
    j["sync"] = sync_name(s.sync);            // absent: step (states of earlier releases)
  if (s.layout != 1) j["layout"] = s.layout;  // absent: 1 (states of earlier releases)
  j["segments"] = nlohmann::json::array();
  for (size_t i = 0; i < s.segments.size(); ++i) {
    auto [w, steps] = s.segments[i];
    if (s.cost_of(i).empty()) {
      j["segments"].push_back({w, steps});
    } else {
      j["segments"].push_back({w, steps, nlohmann::json::parse(s.cost_of(i))});
    }
  }
  bool any_speeds = false;
  for (const auto& v : s.segment_speeds) any_speeds = any_speeds || !v.empty();
  if (any_speeds) j["speeds"] = s.segment_speeds;  // absent: none learned (as before)
  return j.dump();
}

namespace {

// "speeds": per segment [] or one factor per rank of its world size.
std::vector<std::vector<double>> read_speeds(const nlohmann::json& j, const PlanState& s) {
  const std::string where = "sampler state";
  const nlohmann::json& v = j["speeds"];
  if (!v.is_array() || v.size() != s.segments.size())
    throw InputError(where, "'speeds' must be a list with one entry per segment");
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < v.size(); ++i) {
    std::vector<double> f;
    if (!v[i].is_array() || (!v[i].empty() && v[i].size() != size_t(s.segments[i].first)))
      throw InputError(where, "'speeds' of segment " + std::to_string(i) +
                                  " must be [] or one factor per rank of its world size");
    for (const auto& x : v[i]) {
      if (!x.is_number()) throw InputError(where, "'speeds' holds a value that is not a number");
      f.push_back(x.get<double>());
    }
    out.push_back(canonical_speeds(f));
  }
  return out;
}

}  // namespace

PlanState state_from_json(const std::string& text) {
  const std::string where = "sampler state";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (number overflow)
    throw InputError(where, std::string("not valid JSON (truncated or corrupted?): ") + e.what());
  }
  auto hex = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_string())
      throw InputError(where, std::string("missing '") + key + "'");
    const std::string s = j[key].get<std::string>();
    if (s.empty() || s.size() > 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw InputError(where,
                       std::string("'") + key + "' must be a hex string of at most 16 digits");
    return std::stoull(s, nullptr, 16);
  };
  // j.value() throws json::type_error when "format" is not a string: check the type first.
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != "adaptiveload-state")
    throw InputError(where,
                     "not an adaptiveload sampler state (no \"format\": \"adaptiveload-state\")");
  PlanState s;
  if (!j.contains("version") || !j["version"].is_number_integer())
    throw InputError(where, "missing 'version'");
  // Compared as read (int64): get<int>() would wrap 2^32 + 1 to version 1 and accept it.
  const int64_t version = j["version"].get<int64_t>();
  if (version != PlanState::kVersion)
    throw InputError(where, "state version " + std::to_string(version) +
                                " is not supported (this build reads " +
                                std::to_string(PlanState::kVersion) + ")");
  s.version = int(version);
  if (!j.contains("strategy") || !j["strategy"].is_string())
    throw InputError(where, "missing 'strategy'");
  s.strategy = j["strategy"].get<std::string>();
  s.fingerprint = hex("fingerprint");
  s.seed = hex("seed");
  if (!j.contains("epoch") || !j["epoch"].is_number_integer() || j["epoch"].get<int64_t>() < 0)
    throw InputError(where, "'epoch' must be a non-negative integer");
  s.epoch = j["epoch"].get<int64_t>();
  if (j.contains("sync")) {
    if (!j["sync"].is_string() || !parse_sync(j["sync"].get<std::string>(), s.sync))
      throw InputError(where, "'sync' must be " + sync_names("\""));
  }
  s.layout = 1;
  if (j.contains("layout")) {
    if (!j["layout"].is_number_integer() || j["layout"].get<int64_t>() < 1 ||
        j["layout"].get<int64_t>() > PlanState::kLayout)
      throw InputError(
          where, "'layout' must be an integer from 1 to " + std::to_string(PlanState::kLayout));
    s.layout = int(j["layout"].get<int64_t>());
  }
  if (!j.contains("segments") || !j["segments"].is_array() || j["segments"].empty() ||
      j["segments"].size() > kMaxSegments)
    throw InputError(where, "'segments' must be a non-empty list of [world_size, steps_done]");
  bool any_cost = false;
  for (const auto& seg : j["segments"]) {
    if (!seg.is_array() || (seg.size() != 2 && seg.size() != 3) || !seg[0].is_number_integer() ||
        !seg[1].is_number_integer())
      throw InputError(
          where, "each segment must be [world_size, steps_done] or [world_size, steps_done, cost]");
    int64_t w = seg[0].get<int64_t>(), steps = seg[1].get<int64_t>();
    if (w < 1 || w > (1 << 20) || steps < 0)
      throw InputError(where, "segment has an invalid world size or step count");
    s.segments.emplace_back(int(w), steps);
    s.segment_costs.push_back(seg.size() == 3 ? canonical_cost_json(seg[2].dump()) : "");
    any_cost = any_cost || seg.size() == 3;
  }
  if (!any_cost) s.segment_costs.clear();
  if (j.contains("speeds")) s.segment_speeds = read_speeds(j, s);
  return s;
}

}  // namespace adaptiveload
