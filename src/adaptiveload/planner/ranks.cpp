#include "adaptiveload/planner/ranks.h"

#include <cmath>
#include <map>

#include "adaptiveload/planner/option_ranges.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {
namespace {

// Comma-separated fields of `spec` (an empty field kept, for its message).
std::vector<std::string> fields(const std::string& spec) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= spec.size()) {
    const size_t j = std::min(spec.find(',', i), spec.size());
    out.push_back(spec.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

bool whole_number(const std::string& s, long long lo, long long hi, long long& out) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = std::stoll(s);
  return out >= lo && out <= hi;
}

}  // namespace

std::vector<std::string> parse_devices(const std::string& spec, int world_size) {
  const std::string help = " (" + option_word("devices") +
                           "): give a device preset per rank in rank order, as runs "
                           "(h200:8,h100:8) or a list (h200,h200,h100,h100), " +
                           std::to_string(world_size) + " ranks in all (the world size)";
  std::vector<std::string> out;
  for (const std::string& f : fields(spec)) {
    const size_t colon = f.rfind(':');
    const std::string name = colon == std::string::npos ? f : f.substr(0, colon);
    long long n = 1;
    if (name.empty() ||
        (colon != std::string::npos && !whole_number(f.substr(colon + 1), 1, kMaxWorldSize, n)))
      throw ConfigError("devices '" + spec + "': '" + f + "' is not a device or device:count" +
                        help);
    if (int64_t(out.size()) + n > kMaxWorldSize)
      throw ConfigError("devices '" + spec + "' names too many ranks" + help);
    out.insert(out.end(), size_t(n), name);
  }
  if (int64_t(out.size()) != world_size)
    throw ConfigError("devices '" + spec + "' names " + std::to_string(out.size()) +
                      " ranks, not " + std::to_string(world_size) + help);
  return out;
}

std::vector<double> parse_rank_speeds(const std::string& spec, int world_size) {
  const std::string help = " (" + option_word("rank_speed") +
                           "): give rank=factor pairs, e.g. 5=0.7,12=0.9, each rank "
                           "in 0.." +
                           std::to_string(world_size - 1) +
                           " once and each factor in (0, 100] "
                           "(its speed relative to its device)";
  std::vector<double> speed(size_t(world_size), 1.0);
  std::vector<uint8_t> seen(size_t(world_size), 0);
  for (const std::string& f : fields(spec)) {
    const size_t eq = f.find('=');
    long long r = -1;
    double x = -1;
    if (eq != std::string::npos && whole_number(f.substr(0, eq), 0, world_size - 1, r)) {
      const std::string num = f.substr(eq + 1);
      const bool plain =
          !num.empty() && num.find_first_not_of("0123456789.eE-") == std::string::npos;
      try {
        size_t used = 0;
        if (plain) x = std::stod(num, &used);
        if (used != num.size()) x = -1;
      } catch (...) {
        x = -1;
      }
    }
    if (r < 0 || !(x > 0 && x <= 100))
      throw ConfigError("rank speed '" + f + "' in '" + spec + "' is not understood" + help);
    if (seen[size_t(r)])
      throw ConfigError("rank speed: rank " + std::to_string(r) + " is given twice in '" + spec +
                        "'" + help);
    seen[size_t(r)] = 1, speed[size_t(r)] = x;
  }
  return speed;
}

RankDevices resolve_ranks(const std::string& devices, const std::string& rank_speed, int world_size,
                          const DevicePreset& fallback) {
  RankDevices out;
  if (devices.empty() && rank_speed.empty()) return out;
  const size_t W = size_t(world_size);
  if (devices.empty()) {
    out.device.assign(W, fallback);
  } else {
    std::map<std::string, DevicePreset> loaded;
    for (const std::string& name : parse_devices(devices, world_size)) {
      auto it = loaded.find(name);
      if (it == loaded.end()) it = loaded.emplace(name, load_device(name)).first;
      out.device.push_back(it->second);
    }
  }
  for (size_t r = 1; r < W; ++r)
    if (out.device[r].memory_bytes < out.device[out.reference].memory_bytes) out.reference = r;
  const DevicePreset& ref = out.device[out.reference];
  const std::vector<double> stated =
      rank_speed.empty() ? std::vector<double>(W, 1.0) : parse_rank_speeds(rank_speed, world_size);
  for (size_t r = 0; r < W; ++r) {
    const DevicePreset& d = out.device[r];
    out.device_speed.push_back(d.peak_flops * d.efficiency / (ref.peak_flops * ref.efficiency));
    out.speed.push_back(out.device_speed.back() * stated[r]);
  }
  return out;
}

std::string RankDevices::summary() const {
  std::string out;
  for (size_t r = 0; r < device.size();) {
    size_t e = r + 1;
    while (e < device.size() && device[e].name == device[r].name && speed[e] == speed[r]) ++e;
    out += std::string(out.empty() ? "" : ", ") + std::to_string(e - r) + " x " + device[r].name +
           " (speed " + fmt("%.3g", speed[r]) + ")";
    r = e;
  }
  return out;
}

}  // namespace adaptiveload
