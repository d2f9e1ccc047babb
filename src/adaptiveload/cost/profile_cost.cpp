#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/plan/state.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {

ProfileCost::ProfileCost(const std::string& path) {
  using json = nlohmann::json;
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {  // parse_error, or out_of_range (number overflow)
    throw InputError(path, std::string("profile is not valid JSON: ") + e.what());
  }
  // Every entry in [0, hi]: large enough for any real measurement, small enough that the cost
  // of the largest bucket stays finite.
  // `in`: the enclosing object's name for the messages ("link." names 'link.gradient_bytes').
  auto num = [&](const json& o, const char* key, double fallback, bool required, double hi, const char* in = "") {
    const std::string name = std::string(in) + key;
    if (!o.contains(key)) {
      if (required) throw InputError(path, "profile is missing '" + name + "'");
      return fallback;
    }
    if (!o[key].is_number())
      throw InputError(path, "profile field '" + name + "' must be a number");
    double v = o[key].get<double>();
    if (!std::isfinite(v))
      throw InputError(path, "profile field '" + name + "' is not finite");
    if (v > hi) {
      char buf[96];
      snprintf(buf, sizeof buf, "' is %g, above the plausible limit %g", v, hi);
      throw InputError(path, "profile field '" + name + buf + "; re-run `adaptiveload calibrate`");
    }
    return v;
  };
  constexpr double kMaxSeconds = 1e6, kMaxTokens = 1e12, kMaxBytes = 1e15;
  try {
    if (!j.is_object() || j.value("format", "") != "adaptiveload-profile")
      throw InputError(path, "not an adaptiveload profile (expected \"format\": \"adaptiveload-profile\"; write one with `adaptiveload calibrate`)");
    // The version compared as read: get<int>() of a float beyond int's range is undefined
    // behaviour (the fuzzer's "version": 1.5e74), 2^32 + 1 would wrap to 1 and 1.5 truncate to
    // it. A version that is not a number stays j.value()'s type error ("malformed profile").
    const auto ver = j.find("version");
    const bool version_1 = ver != j.end() && (!ver->is_number()            ? j.value("version", 0) == 1
                                              : ver->is_number_float()    ? ver->get<double>() == 1.0
                                              : ver->is_number_unsigned() ? ver->get<uint64_t>() == 1u
                                                                          : ver->get<int64_t>() == 1);
    if (!version_1) throw InputError(path, "unsupported profile version (this build reads version 1)");
    if (j.contains("cost")) {
      const json& c = j["cost"];
      // a: seconds per token, b: per token^2, c0: per sample.
      a_ = num(c, "a", 0, true, 1), b_ = num(c, "b", 0, true, 1e-3),
      c0_ = num(c, "c0", 0, true, kMaxSeconds);
      overhead_s = num(c, "overhead_s", 0, false, kMaxSeconds);
      half_efficiency_tokens = num(c, "half_efficiency_tokens", 0, false, kMaxTokens);
      // Seconds per sample of a pack of several shapes (`calibrate --packs N --fit-packs`).
      pack_sample_s = num(c, "pack_sample_s", 0, false, kMaxSeconds);
      if (a_ < 0 || b_ < 0 || c0_ < 0 || overhead_s < 0 || half_efficiency_tokens < 0 || pack_sample_s < 0)
        throw InputError(path, "profile cost coefficients must be >= 0");
      if (a_ == 0 && b_ == 0 && c0_ == 0) throw InputError(path, "profile cost coefficients are all zero");
    } else if (j.contains("table")) {
      for (const json& row : j["table"]) {
        if (!row.is_array() || row.size() != 2 || !row[0].is_number() || !row[1].is_number())
          throw InputError(path, "profile 'table' rows must be [tokens, seconds_per_sample]");
        double s = row[0].get<double>(), t = row[1].get<double>();
        if (!(s > 0) || !(t > 0) || !(s <= kMaxTokens) || !(t <= kMaxSeconds))
          throw InputError(
              path,
              "profile 'table' rows must be [tokens, seconds_per_sample] with tokens in (0, 1e12] "
              "and seconds in (0, 1e6]");
        table_.emplace_back(s, t);
      }
      if (table_.empty()) throw InputError(path, "profile 'table' is empty");
      std::sort(table_.begin(), table_.end());
      if (j.contains("overhead_s")) overhead_s = num(j, "overhead_s", 0, false, kMaxSeconds);
      for (size_t i = 1; i < table_.size(); ++i)
        if (table_[i].first == table_[i - 1].first)
          throw InputError(path, "profile 'table' has two rows for " +
                                     std::to_string(int64_t(table_[i].first)) +
                                     " tokens; keep one");
    } else {
      throw InputError(path, "profile has neither 'cost' coefficients nor a 'table'");
    }
    if (j.contains("memory")) {
      const json& m = j["memory"];
      memory_.static_bytes = num(m, "static_bytes", 0, true, kMaxBytes);
      memory_.m0 = num(m, "m0", 0, true, kMaxBytes);
      memory_.m1 = num(m, "m1", 0, true, kMaxBytes);
      if (memory_.static_bytes < 0 || memory_.m0 < 0 || memory_.m1 < 0)
        throw InputError(path, "profile memory coefficients must be >= 0");
      has_memory_ = true;
    }
    if (j.contains("step")) {
      const json& s = j["step"];
      if (!s.is_object())
        throw InputError(path, "profile field 'step' must be an object {\"optimizer_s\": seconds}");
      if (!s.contains("optimizer_s"))
        throw InputError(path, "profile field 'step' is missing 'optimizer_s' (seconds of one optimizer step); "
                               "re-run `adaptiveload calibrate`, or remove 'step'");
      step_s_ = num(s, "optimizer_s", 0, true, kMaxSeconds);
      if (step_s_ < 0)
        throw InputError(path, "profile field 'optimizer_s' must be >= 0 seconds; re-run `adaptiveload calibrate`");
    }
    if (j.contains("link")) {
      const json& l = j["link"];
      const char* what =
          "profile field 'link' must be an object {\"allreduce_bus_bytes_per_s\": bytes per second, "
          "\"allreduce_latency_s\": seconds}; re-run `adaptiveload calibrate --allreduce-ranks N`, or remove 'link'";
      if (!l.is_object() || !l.contains("allreduce_bus_bytes_per_s") || !l.contains("allreduce_latency_s"))
        throw InputError(path, what);
      link_bus_bytes_per_s_ = num(l, "allreduce_bus_bytes_per_s", 0, true, kMaxBytes, "link.");
      link_latency_s_ = num(l, "allreduce_latency_s", 0, true, kMaxSeconds, "link.");
      link_gradient_bytes_ = num(l, "gradient_bytes", 0, false, kMaxBytes, "link.");
      if (link_gradient_bytes_ < 0)
        throw InputError(path, "profile field 'link.gradient_bytes' must be >= 0 bytes (0: the model preset's); "
                               "re-run `adaptiveload calibrate --allreduce-ranks N`");
      if (!(link_bus_bytes_per_s_ > 0) || link_latency_s_ < 0)
        throw InputError(path, "profile field 'link' needs allreduce_bus_bytes_per_s > 0 and allreduce_latency_s >= 0; "
                               "re-run `adaptiveload calibrate --allreduce-ranks N`");
    }
  } catch (const json::exception& e) {
    throw InputError(path, std::string("malformed profile: ") + e.what());
  }
}

std::unique_ptr<ProfileCost> ProfileCost::from_cost_json(const std::string& text) {
  auto j = nlohmann::json::parse(canonical_cost_json(text));
  std::unique_ptr<ProfileCost> p(new ProfileCost());
  p->a_ = j["a"].get<double>(), p->b_ = j["b"].get<double>(), p->c0_ = j["c0"].get<double>();
  p->overhead_s = j["overhead_s"].get<double>();
  p->half_efficiency_tokens = j["half_efficiency_tokens"].get<double>();
  p->pack_sample_s = j.value("pack_sample_s", 0.0);
  return p;
}

double ProfileCost::sample_time(const Bucket& b) const {
  const double S = double(b.tokens);
  if (table_.empty()) return a_ * S + b_ * S * S + c0_;
  if (table_.size() == 1) return table_[0].second * S / table_[0].first;
  auto it = std::lower_bound(table_.begin(), table_.end(), std::make_pair(S, 0.0));
  size_t hi = std::clamp<size_t>(size_t(it - table_.begin()), 1, table_.size() - 1);
  const auto& p0 = table_[hi - 1];
  const auto& p1 = table_[hi];
  double t = p0.second + (p1.second - p0.second) * (S - p0.first) / (p1.first - p0.first);
  return std::max(t, 1e-12);
}

}  // namespace adaptiveload
