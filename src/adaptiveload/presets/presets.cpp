#include "adaptiveload/presets/presets.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "adaptiveload/presets/resources.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

using json = nlohmann::json;

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || (s.size() > 5 && s.substr(s.size() - 5) == ".json");
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Returns the parsed JSON and the name to use in messages.
std::pair<json, std::string> load_json(const std::string& kind, const std::string& name_or_path) {
  std::string text, where;
  if (looks_like_path(name_or_path)) {
    text = read_file(name_or_path);
    where = name_or_path;
  } else {
    where = "presets/" + kind + "/" + name_or_path + ".json";
    const std::string_view* r = find_resource(where);
    if (!r) {
      throw ConfigError("unknown " + kind.substr(0, kind.size() - 1) + " preset '" + name_or_path +
                        "'; built-in presets: " + join(preset_names(kind)) +
                        " (or pass a path to a .json file)");
    }
    text = std::string(*r);
  }
  try {
    return {json::parse(text), where};
  } catch (const json::exception& e) {  // parse_error, or out_of_range (number overflow)
    throw InputError(where, std::string("not valid JSON: ") + e.what());
  }
}

template <class T>
T get(const json& j, const std::string& where, const char* key) {
  if (!j.contains(key)) throw InputError(where, std::string("missing field '") + key + "'");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    throw InputError(where, std::string("field '") + key + "' has the wrong type: " + e.what());
  }
}

template <class T>
T get_or(const json& j, const std::string& where, const char* key, T fallback) {
  return j.contains(key) ? get<T>(j, where, key) : fallback;
}

void require_positive(double v, const std::string& where, const char* key) {
  if (!(v > 0)) throw InputError(where, std::string("field '") + key + "' must be positive");
}

std::map<std::string, std::map<int, int>> parse_fixed(const json& j, const std::string& where) {
  std::map<std::string, std::map<int, int>> out;
  if (!j.is_object()) throw InputError(where, "fixed batch sizes must be an object tier -> frames -> B");
  for (auto& [tier, frames] : j.items()) {
    if (!frames.is_object()) throw InputError(where, "fixed batch sizes of tier '" + tier + "' must be an object");
    for (auto& [f, b] : frames.items()) {
      int fi = 0;
      try {
        fi = std::stoi(f);
      } catch (...) {
        throw InputError(where, "fixed batch sizes: frame key '" + f + "' of tier '" + tier + "' is not an integer");
      }
      // Open-Sora writes [keep_probability, batch_size]; a bare integer is the batch size.
      int bi = b.is_array() && b.size() == 2 ? b[1].get<int>() : b.is_number_integer() ? b.get<int>() : -1;
      if (bi <= 0) throw InputError(where, "fixed batch size for " + tier + "/" + f + " must be a positive integer");
      out[tier][fi] = bi;
    }
  }
  return out;
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot open file (check the path and permissions)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t Tier::area() const {
  int64_t a = 0;
  for (const auto& s : sizes) a = std::max<int64_t>(a, int64_t(s.h) * s.w);
  return a;
}

ModelPreset load_model(const std::string& name_or_path) {
  auto [j, where] = load_json("models", name_or_path);
  ModelPreset m;
  m.name = get<std::string>(j, where, "name");
  auto vs = get<std::vector<int>>(j, where, "vae_stride");
  auto ps = get<std::vector<int>>(j, where, "patch");
  if (vs.size() != 3 || ps.size() != 3) throw InputError(where, "'vae_stride' and 'patch' need 3 entries [t, h, w]");
  for (int v : vs) require_positive(v, where, "vae_stride");
  for (int v : ps) require_positive(v, where, "patch");
  m.vae_t = vs[0], m.vae_h = vs[1], m.vae_w = vs[2];
  m.patch_t = ps[0], m.patch_h = ps[1], m.patch_w = ps[2];
  m.latent_channels = get_or<int>(j, where, "latent_channels", 16);
  m.dim = get<int64_t>(j, where, "dim");
  m.ffn_dim = get<int64_t>(j, where, "ffn_dim");
  m.layers = get<int64_t>(j, where, "layers");
  m.heads = get<int64_t>(j, where, "heads");
  m.text_len = get<int64_t>(j, where, "text_len");
  for (auto [k, v] : {std::pair{"dim", m.dim}, {"ffn_dim", m.ffn_dim}, {"layers", m.layers}, {"heads", m.heads}})
    require_positive(double(v), where, k);
  if (m.text_len < 0) throw InputError(where, "field 'text_len' must be >= 0");
  std::string text_mode = get_or<std::string>(j, where, "text_mode", "cross");
  if (text_mode != "cross" && text_mode != "joint") throw InputError(where, "field 'text_mode' must be \"cross\" or \"joint\"");
  m.joint_text = text_mode == "joint";
  std::string attention = get_or<std::string>(j, where, "attention", "full");
  if (attention != "full" && attention != "spatial_temporal")
    throw InputError(where, "field 'attention' must be \"full\" or \"spatial_temporal\"");
  m.spatial_temporal = attention == "spatial_temporal";
  // Per block: q,k,v,o (4 D^2), cross-attention q,k,v,o (4 D^2, absent for joint text),
  // feed-forward (2 D F), six modulation vectors are produced outside the blocks.
  double D = double(m.dim), F = double(m.ffn_dim);
  double per_block = 4 * D * D + (m.joint_text ? 0 : 4 * D * D) + 2 * D * F;
  m.params = get_or<double>(j, where, "params", per_block * double(m.layers));
  return m;
}

DevicePreset load_device(const std::string& name_or_path) {
  auto [j, where] = load_json("devices", name_or_path);
  DevicePreset d;
  d.name = get<std::string>(j, where, "name");
  d.memory_bytes = get<double>(j, where, "memory_gb") * 1e9;
  d.peak_flops = get<double>(j, where, "peak_tflops") * 1e12;
  d.efficiency = get_or<double>(j, where, "efficiency", 0.45);
  d.allreduce_bus_bytes_per_s = get<double>(j, where, "allreduce_bus_gbps") * 1e9;
  d.allreduce_latency_s = get_or<double>(j, where, "allreduce_latency_us", 40.0) * 1e-6;
  d.microbatch_overhead_s = get_or<double>(j, where, "microbatch_overhead_ms", 3.0) * 1e-3;
  d.half_efficiency_tokens = get_or<double>(j, where, "half_efficiency_tokens", 2048.0);
  d.memory_reserve_fraction = get_or<double>(j, where, "memory_reserve_fraction", 0.1);
  require_positive(d.memory_bytes, where, "memory_gb");
  require_positive(d.peak_flops, where, "peak_tflops");
  require_positive(d.allreduce_bus_bytes_per_s, where, "allreduce_bus_gbps");
  if (!(d.efficiency > 0 && d.efficiency <= 1)) throw InputError(where, "field 'efficiency' must be in (0, 1]");
  if (!(d.memory_reserve_fraction >= 0 && d.memory_reserve_fraction < 1))
    throw InputError(where, "field 'memory_reserve_fraction' must be in [0, 1)");
  if (d.microbatch_overhead_s < 0 || d.half_efficiency_tokens < 0 || d.allreduce_latency_s < 0)
    throw InputError(where, "overheads and latencies must be >= 0");
  return d;
}

BucketGrid load_grid(const std::string& name_or_path) {
  auto [j, where] = load_json("grids", name_or_path);
  BucketGrid g;
  g.name = get<std::string>(j, where, "name");
  g.fps = get<double>(j, where, "fps");
  require_positive(g.fps, where, "fps");
  g.frames = get<std::vector<int>>(j, where, "frames");
  if (g.frames.empty()) throw InputError(where, "field 'frames' must list at least one frame count");
  std::sort(g.frames.begin(), g.frames.end());
  g.frames.erase(std::unique(g.frames.begin(), g.frames.end()), g.frames.end());
  if (g.frames.front() < 1) throw InputError(where, "frame counts must be >= 1");
  if (!j.contains("tiers") || !j["tiers"].is_array() || j["tiers"].empty())
    throw InputError(where, "field 'tiers' must be a non-empty array");
  for (const auto& tj : j["tiers"]) {
    Tier t;
    t.name = get<std::string>(tj, where, "name");
    if (!tj.contains("sizes") || !tj["sizes"].is_object() || tj["sizes"].empty())
      throw InputError(where, "tier '" + t.name + "' needs a non-empty 'sizes' object");
    for (auto& [ratio, hw] : tj["sizes"].items()) {
      if (!hw.is_array() || hw.size() != 2 || !hw[0].is_number_integer() || !hw[1].is_number_integer())
        throw InputError(where, "tier '" + t.name + "' size '" + ratio + "' must be [height, width]");
      TierSize s{ratio, hw[0].get<int>(), hw[1].get<int>()};
      if (s.h <= 0 || s.w <= 0) throw InputError(where, "tier '" + t.name + "' size '" + ratio + "' must be positive");
      t.sizes.push_back(s);
    }
    g.tiers.push_back(std::move(t));
  }
  std::stable_sort(g.tiers.begin(), g.tiers.end(), [](const Tier& a, const Tier& b) { return a.area() < b.area(); });
  if (j.contains("fixed_batch_sizes")) g.fixed_batch_sizes = parse_fixed(j["fixed_batch_sizes"], where);
  return g;
}

std::map<std::string, std::map<int, int>> load_fixed_batch_sizes(const std::string& path) {
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {  // parse_error, or out_of_range (number overflow)
    throw InputError(path, std::string("not valid JSON: ") + e.what());
  }
  if (j.contains("fixed_batch_sizes")) return parse_fixed(j["fixed_batch_sizes"], path);
  return parse_fixed(j, path);
}

std::vector<std::string> preset_names(const std::string& kind) {
  std::vector<std::string> names;
  std::string prefix = "presets/" + kind + "/";
  for (const Resource& r : embedded_resources()) {
    std::string p = r.path;
    if (p.rfind(prefix, 0) == 0 && p.size() > prefix.size() + 5)
      names.push_back(p.substr(prefix.size(), p.size() - prefix.size() - 5));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace adaptiveload
