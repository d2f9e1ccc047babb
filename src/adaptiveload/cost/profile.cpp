// Reading a profile file once into a Profile (profile.h).
#include "adaptiveload/cost/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "adaptiveload/plan/state.h"
#include "adaptiveload/presets/presets.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

using json = nlohmann::json;
constexpr double kMaxSeconds = 1e6, kMaxTokens = 1e12, kMaxBytes = 1e15;

// Every number of a profile: present (or its fallback), finite and at most `hi` (large enough
// for any real measurement, small enough that the cost of the largest bucket stays finite).
// `in`: the enclosing object's name for the messages ("link." names 'link.gradient_bytes').
struct Numbers {
  const std::string& path;
  double operator()(const json& o, const char* key, double fallback, bool required, double hi,
                    const char* in = "") const {
    const std::string name = std::string(in) + key;
    if (!o.contains(key)) {
      if (required) throw InputError(path, "profile is missing '" + name + "'");
      return fallback;
    }
    if (!o[key].is_number())
      throw InputError(path, "profile field '" + name + "' must be a number");
    double v = o[key].get<double>();
    if (!std::isfinite(v)) throw InputError(path, "profile field '" + name + "' is not finite");
    if (v > hi) {
      char buf[96];
      snprintf(buf, sizeof buf, "' is %g, above the plausible limit %g", v, hi);
      throw InputError(path, "profile field '" + name + buf + "; re-run `adaptiveload calibrate`");
    }
    return v;
  }
};

void check_format(const json& j, const std::string& path) {
  if (!j.is_object() || j.value("format", "") != "adaptiveload-profile")
    throw InputError(path,
                     "not an adaptiveload profile (expected \"format\": \"adaptiveload-profile\"; "
                     "write one with `adaptiveload calibrate`)");
  // The version compared as read: get<int>() of a float beyond int's range is undefined
  // behaviour (the fuzzer's "version": 1.5e74), 2^32 + 1 would wrap to 1 and 1.5 truncate to
  // it. A version that is not a number stays j.value()'s type error ("malformed profile").
  const auto ver = j.find("version");
  const bool version_1 = ver != j.end() && (!ver->is_number()           ? j.value("version", 0) == 1
                                            : ver->is_number_float()    ? ver->get<double>() == 1.0
                                            : ver->is_number_unsigned() ? ver->get<uint64_t>() == 1u
                                                                        : ver->get<int64_t>() == 1);
  if (!version_1)
    throw InputError(path, "unsupported profile version (this build reads version 1)");
}

void read_coefficients(const json& c, const Numbers& num, Profile& p) {
  // a: seconds per token, b: per token^2, c0: per sample.
  p.a = num(c, "a", 0, true, 1), p.b = num(c, "b", 0, true, 1e-3),
  p.c0 = num(c, "c0", 0, true, kMaxSeconds);
  p.overhead_s = num(c, "overhead_s", 0, false, kMaxSeconds);
  p.half_efficiency_tokens = num(c, "half_efficiency_tokens", 0, false, kMaxTokens);
  // Seconds per sample of a pack of several shapes (`calibrate --packs N --fit-packs`).
  p.pack_sample_s = num(c, "pack_sample_s", 0, false, kMaxSeconds);
  if (p.a < 0 || p.b < 0 || p.c0 < 0 || p.overhead_s < 0 || p.half_efficiency_tokens < 0 ||
      p.pack_sample_s < 0)
    throw InputError(num.path, "profile cost coefficients must be >= 0");
  if (p.a == 0 && p.b == 0 && p.c0 == 0)
    throw InputError(num.path, "profile cost coefficients are all zero");
}

void read_table(const json& j, const Numbers& num, Profile& p) {
  const std::string& path = num.path;
  for (const json& row : j["table"]) {
    if (!row.is_array() || row.size() != 2 || !row[0].is_number() || !row[1].is_number())
      throw InputError(path, "profile 'table' rows must be [tokens, seconds_per_sample]");
    double s = row[0].get<double>(), t = row[1].get<double>();
    if (!(s > 0) || !(t > 0) || !(s <= kMaxTokens) || !(t <= kMaxSeconds))
      throw InputError(
          path,
          "profile 'table' rows must be [tokens, seconds_per_sample] with tokens in (0, 1e12] "
          "and seconds in (0, 1e6]");
    p.table.emplace_back(s, t);
  }
  if (p.table.empty()) throw InputError(path, "profile 'table' is empty");
  std::sort(p.table.begin(), p.table.end());
  if (j.contains("overhead_s")) p.overhead_s = num(j, "overhead_s", 0, false, kMaxSeconds);
  for (size_t i = 1; i < p.table.size(); ++i)
    if (p.table[i].first == p.table[i - 1].first)
      throw InputError(path, "profile 'table' has two rows for " +
                                 std::to_string(int64_t(p.table[i].first)) + " tokens; keep one");
}

void read_memory(const json& m, const Numbers& num, Profile& p) {
  p.memory.static_bytes = num(m, "static_bytes", 0, true, kMaxBytes);
  p.memory.m0 = num(m, "m0", 0, true, kMaxBytes);
  p.memory.m1 = num(m, "m1", 0, true, kMaxBytes);
  if (p.memory.static_bytes < 0 || p.memory.m0 < 0 || p.memory.m1 < 0)
    throw InputError(num.path, "profile memory coefficients must be >= 0");
  p.has_memory = true;
}

void read_step(const json& s, const Numbers& num, Profile& p) {
  const std::string& path = num.path;
  if (!s.is_object())
    throw InputError(path, "profile field 'step' must be an object {\"optimizer_s\": seconds}");
  if (!s.contains("optimizer_s"))
    throw InputError(
        path,
        "profile field 'step' is missing 'optimizer_s' (seconds of one optimizer step); "
        "re-run `adaptiveload calibrate`, or remove 'step'");
  p.step_s = num(s, "optimizer_s", 0, true, kMaxSeconds);
  if (p.step_s < 0)
    throw InputError(
        path, "profile field 'optimizer_s' must be >= 0 seconds; re-run `adaptiveload calibrate`");
}

void read_link(const json& l, const Numbers& num, Profile& p) {
  const std::string& path = num.path;
  const char* what =
      "profile field 'link' must be an object {\"allreduce_bus_bytes_per_s\": bytes per second, "
      "\"allreduce_latency_s\": seconds}; re-run `adaptiveload calibrate --allreduce-ranks N`, or "
      "remove 'link'";
  if (!l.is_object() || !l.contains("allreduce_bus_bytes_per_s") ||
      !l.contains("allreduce_latency_s"))
    throw InputError(path, what);
  p.link_bus_bytes_per_s = num(l, "allreduce_bus_bytes_per_s", 0, true, kMaxBytes, "link.");
  p.link_latency_s = num(l, "allreduce_latency_s", 0, true, kMaxSeconds, "link.");
  p.link_gradient_bytes = num(l, "gradient_bytes", 0, false, kMaxBytes, "link.");
  if (p.link_gradient_bytes < 0)
    throw InputError(
        path,
        "profile field 'link.gradient_bytes' must be >= 0 bytes (0: the model preset's); "
        "re-run `adaptiveload calibrate --allreduce-ranks N`");
  if (!(p.link_bus_bytes_per_s > 0) || p.link_latency_s < 0)
    throw InputError(
        path,
        "profile field 'link' needs allreduce_bus_bytes_per_s > 0 and allreduce_latency_s >= 0; "
        "re-run `adaptiveload calibrate --allreduce-ranks N`");
}

// The calibration's measurements, for the report's cost chart: (tokens, time_s / batch).
void read_points(const json& points, const std::string& path, Profile& p) {
  if (!points.is_array())
    throw InputError(path, "profile 'points' must be an array of {tokens, batch, time_s}");
  size_t i = 0;
  for (const json& pt : points) {
    const std::string where = path + ": points[" + std::to_string(i++) + "]";
    auto get = [&](const char* key) {
      if (!pt.is_object() || !pt.contains(key) || !pt[key].is_number())
        throw InputError(where, std::string("needs a number '") + key +
                                    "' (entries are {tokens, batch, time_s})");
      const double v = pt[key].get<double>();
      if (!std::isfinite(v) || v <= 0)
        throw InputError(where, std::string("'") + key + "' must be positive");
      return v;
    };
    const double tokens = get("tokens"), batch = get("batch"), time_s = get("time_s");
    p.points.emplace_back(tokens, time_s / batch);
  }
}

}  // namespace

Profile load_profile(const std::string& path) {
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {  // parse_error, or out_of_range (number overflow)
    throw InputError(path, std::string("profile is not valid JSON: ") + e.what());
  }
  Profile p;
  p.path = path;
  const Numbers num{path};
  try {
    check_format(j, path);
    if (j.contains("cost"))
      read_coefficients(j["cost"], num, p);
    else if (j.contains("table"))
      read_table(j, num, p);
    else
      throw InputError(path, "profile has neither 'cost' coefficients nor a 'table'");
    if (j.contains("memory")) read_memory(j["memory"], num, p);
    if (j.contains("step")) read_step(j["step"], num, p);
    if (j.contains("link")) read_link(j["link"], num, p);
    if (j.contains("points")) read_points(j["points"], path, p);
  } catch (const json::exception& e) {
    throw InputError(path, std::string("malformed profile: ") + e.what());
  }
  return p;
}

Profile profile_from_cost_json(const std::string& text) {
  auto j = json::parse(canonical_cost_json(text));
  Profile p;
  p.a = j["a"].get<double>(), p.b = j["b"].get<double>(), p.c0 = j["c0"].get<double>();
  p.overhead_s = j["overhead_s"].get<double>();
  p.half_efficiency_tokens = j["half_efficiency_tokens"].get<double>();
  p.pack_sample_s = j.value("pack_sample_s", 0.0);
  return p;
}

}  // namespace adaptiveload
