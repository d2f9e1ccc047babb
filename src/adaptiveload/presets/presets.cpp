#include "adaptiveload/presets/presets.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

std::string num_text(double v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A number in [lo, hi] (finite by construction); the message names the field and the range.
double get_number(const json& j, const std::string& where, const char* key, double lo, double hi,
                  const double* fallback = nullptr) {
  if (!j.contains(key)) {
    if (fallback) return *fallback;
    throw InputError(where, std::string("missing field '") + key + "'");
  }
  const json& v = j.at(key);
  if (!v.is_number())
    throw InputError(where,
                     std::string("field '") + key + "' must be a number, got " + v.type_name());
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi))
    throw InputError(where, std::string("field '") + key + "' is " + num_text(d) + ", outside [" +
                                num_text(lo) + ", " + num_text(hi) + "]");
  return d;
}
double get_number_or(const json& j, const std::string& where, const char* key, double lo, double hi,
                     double fallback) {
  return get_number(j, where, key, lo, hi, &fallback);
}

// An integer in [lo, hi]. Read through a range check, never nlohmann's get<int>, which casts a
// float such as 1e300 to int without one.
int64_t int_value(const json& v, const std::string& where, const std::string& what, int64_t lo,
                  int64_t hi) {
  if (!v.is_number()) throw InputError(where, what + " must be an integer, got " + v.type_name());
  double d = v.get<double>();
  if (v.is_number_float() && d != std::floor(d))
    throw InputError(where, what + " must be an integer, got " + num_text(d));
  if (v.is_number_unsigned()) d = double(v.get<uint64_t>());
  if (v.is_number_integer() && !v.is_number_unsigned()) d = double(v.get<int64_t>());
  if (!(d >= double(lo) && d <= double(hi)))
    throw InputError(where, what + " is " + num_text(d) + ", outside [" + std::to_string(lo) +
                                ", " + std::to_string(hi) + "]");
  return v.is_number_float()      ? int64_t(d)
         : v.is_number_unsigned() ? int64_t(v.get<uint64_t>())
                                  : v.get<int64_t>();
}
int64_t get_int(const json& j, const std::string& where, const char* key, int64_t lo, int64_t hi,
                const int64_t* fallback = nullptr) {
  if (!j.contains(key)) {
    if (fallback) return *fallback;
    throw InputError(where, std::string("missing field '") + key + "'");
  }
  return int_value(j.at(key), where, std::string("field '") + key + "'", lo, hi);
}
int64_t get_int_or(const json& j, const std::string& where, const char* key, int64_t lo, int64_t hi,
                   int64_t fallback) {
  return get_int(j, where, key, lo, hi, &fallback);
}
std::vector<int> get_int_list(const json& j, const std::string& where, const char* key, int64_t lo,
                              int64_t hi) {
  if (!j.contains(key)) throw InputError(where, std::string("missing field '") + key + "'");
  const json& v = j.at(key);
  if (!v.is_array())
    throw InputError(where, std::string("field '") + key + "' must be an array of integers");
  std::vector<int> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(int(int_value(
        v[i], where, std::string("field '") + key + "' entry " + std::to_string(i), lo, hi)));
  return out;
}

// Limits beyond which a preset value is a typo (or would overflow the cost arithmetic).
constexpr int64_t kMaxDim = 1 << 20;
constexpr int64_t kMaxLayers = 100'000;
constexpr int64_t kMaxStride = 1024;
constexpr int64_t kMaxTextLen = 1 << 20;
constexpr int64_t kMaxFrames = 10'000'000;  // as the manifest's limit
constexpr int64_t kMaxSide = 65'536;        // as the manifest's limit

std::map<std::string, std::map<int, int>> parse_fixed(const json& j, const std::string& where) {
  std::map<std::string, std::map<int, int>> out;
  if (!j.is_object())
    throw InputError(where, "fixed batch sizes must be an object tier -> frames -> B");
  for (auto& [tier, frames] : j.items()) {
    if (!frames.is_object())
      throw InputError(where, "fixed batch sizes of tier '" + tier + "' must be an object");
    for (auto& [f, b] : frames.items()) {
      int fi = 0;
      try {
        fi = std::stoi(f);
      } catch (...) {
        throw InputError(where, "fixed batch sizes: frame key '" + f + "' of tier '" + tier +
                                    "' is not an integer");
      }
      // Open-Sora writes [keep_probability, batch_size]; a bare integer is the batch size.
      const json* bj = b.is_array() && b.size() == 2 ? &b[1] : &b;
      if (!bj->is_number_integer())
        throw InputError(where,
                         "fixed batch size for " + tier + "/" + f + " must be a positive integer");
      out[tier][fi] =
          int(int_value(*bj, where, "fixed batch size for " + tier + "/" + f, 1, 1 << 20));
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
  auto vs = get_int_list(j, where, "vae_stride", 1, kMaxStride);
  auto ps = get_int_list(j, where, "patch", 1, kMaxStride);
  if (vs.size() != 3 || ps.size() != 3)
    throw InputError(where, "'vae_stride' and 'patch' need 3 entries [t, h, w]");
  m.vae_t = vs[0], m.vae_h = vs[1], m.vae_w = vs[2];
  m.patch_t = ps[0], m.patch_h = ps[1], m.patch_w = ps[2];
  m.latent_channels = int(get_int_or(j, where, "latent_channels", 1, 4096, 16));
  m.dim = get_int(j, where, "dim", 1, kMaxDim);
  m.ffn_dim = get_int(j, where, "ffn_dim", 1, 16 * kMaxDim);
  m.heads = get_int(j, where, "heads", 1, kMaxDim);
  m.text_len = get_int(j, where, "text_len", 0, kMaxTextLen);
  std::string text_mode = get_or<std::string>(j, where, "text_mode", "cross");
  if (text_mode != "cross" && text_mode != "joint")
    throw InputError(where, "field 'text_mode' must be \"cross\" or \"joint\"");
  m.joint_text = text_mode == "joint";
  std::string attention = get_or<std::string>(j, where, "attention", "full");
  if (attention != "full" && attention != "spatial_temporal")
    throw InputError(where, "field 'attention' must be \"full\" or \"spatial_temporal\"");
  m.spatial_temporal = attention == "spatial_temporal";
  // Layers: "layers" blocks of one kind, or (MMDiT, HunyuanVideo / Flux style) dual-stream
  // blocks with separate video and text weights plus single-stream blocks with shared ones.
  m.dual_stream_layers = get_int_or(j, where, "dual_stream_layers", 0, kMaxLayers, 0);
  m.single_stream_layers = get_int_or(j, where, "single_stream_layers", 0, kMaxLayers, 0);
  if (m.dual_stream_layers + m.single_stream_layers > 0) {
    if (j.contains("layers") && get_int(j, where, "layers", 1, 2 * kMaxLayers) !=
                                    m.dual_stream_layers + m.single_stream_layers)
      throw InputError(
          where,
          "field 'layers' must equal dual_stream_layers + single_stream_layers (or be left out)");
    if (!m.joint_text)
      throw InputError(where,
                       "dual_stream_layers / single_stream_layers need \"text_mode\": \"joint\"");
    m.layers = m.dual_stream_layers + m.single_stream_layers;
  } else {
    m.layers = get_int(j, where, "layers", 1, kMaxLayers);
  }
  // Input width of each block's own adaLN modulation linear (0: the modulation is shared by
  // all blocks, as in Wan and Open-Sora); CogVideoX: its time embedding (512), HunyuanVideo: D.
  // modulation_vectors: D-vectors that linear produces per block (CogVideoX: 2 x 6).
  m.modulation_dim = get_int_or(j, where, "modulation_dim", 0, kMaxDim, 0);
  m.modulation_vectors = get_int_or(j, where, "modulation_vectors", 0, 64, 6);
  m.default_grid = get_or<std::string>(j, where, "default_grid", "wan");
  m.params = j.contains("params") ? get_number(j, where, "params", 1, 1e15) : transformer_params(m);
  if (!(m.params <= 1e15))
    throw InputError(where,
                     "the model's dims give " + num_text(m.params) + " parameters; check them");
  return m;
}

double transformer_params(const ModelPreset& m) {
  // Weights of the transformer blocks (embeddings and the final layer are < 2% and left out).
  //   attention: q, k, v, o = 4 D^2; cross-attention to text: another 4 D^2 (absent for joint
  //   text); feed-forward: 2 D F; adaLN modulation linear: modulation_vectors D x modulation_dim.
  // A dual-stream block keeps separate attention, feed-forward and modulation weights for the
  // video and the text tokens (twice the above); a single-stream block fuses q, k, v and the
  // FFN input into one linear and the attention output and FFN output into another (the same
  // 4 D^2 + 2 D F) with a 3-vector modulation.
  const double D = double(m.dim), F = double(m.ffn_dim), Dm = double(m.modulation_dim);
  const double attn = 4 * D * D + (m.joint_text ? 0 : 4 * D * D), ffn = 2 * D * F;
  if (m.dual_stream_layers + m.single_stream_layers > 0) {
    const double dual = 2 * (attn + ffn + 6 * D * Dm), single = attn + ffn + 3 * D * Dm;
    return double(m.dual_stream_layers) * dual + double(m.single_stream_layers) * single;
  }
  return double(m.layers) * (attn + ffn + double(m.modulation_vectors) * D * Dm);
}

DevicePreset load_device(const std::string& name_or_path) {
  auto [j, where] = load_json("devices", name_or_path);
  DevicePreset d;
  d.name = get<std::string>(j, where, "name");
  // Units as in the file; ranges wide enough for any real accelerator, tight enough that the
  // products below stay finite.
  d.memory_bytes = get_number(j, where, "memory_gb", 1e-3, 1e6) * 1e9;
  d.peak_flops = get_number(j, where, "peak_tflops", 1e-6, 1e9) * 1e12;
  d.efficiency = get_number_or(j, where, "efficiency", 1e-6, 1, 0.45);
  d.allreduce_bus_bytes_per_s = get_number(j, where, "allreduce_bus_gbps", 1e-6, 1e9) * 1e9;
  d.allreduce_latency_s = get_number_or(j, where, "allreduce_latency_us", 0, 1e9, 40.0) * 1e-6;
  d.microbatch_overhead_s = get_number_or(j, where, "microbatch_overhead_ms", 0, 1e9, 3.0) * 1e-3;
  d.half_efficiency_tokens = get_number_or(j, where, "half_efficiency_tokens", 0, 1e12, 2048.0);
  d.memory_reserve_fraction = get_number_or(j, where, "memory_reserve_fraction", 0, 0.99, 0.1);
  d.node_size = int(get_number_or(j, where, "node_size", 1, 1024, 8));
  if (d.node_size & (d.node_size - 1))
    throw InputError(where, "field 'node_size' must be a power of two (1, 2, 4, 8, ..)");
  // Default: the all-reduce bus bandwidth (the same links).
  d.alltoall_bytes_per_s =
      get_number_or(j, where, "alltoall_gbps", 1e-6, 1e9, d.allreduce_bus_bytes_per_s / 1e9) * 1e9;
  d.alltoall_latency_s = get_number_or(j, where, "alltoall_latency_us", 0, 1e9, 20.0) * 1e-6;
  return d;
}

BucketGrid load_grid(const std::string& name_or_path) {
  auto [j, where] = load_json("grids", name_or_path);
  BucketGrid g;
  g.name = get<std::string>(j, where, "name");
  g.fps = get_number(j, where, "fps", 1e-3, 1000);
  g.frames = get_int_list(j, where, "frames", 1, kMaxFrames);
  if (g.frames.empty())
    throw InputError(where, "field 'frames' must list at least one frame count");
  std::sort(g.frames.begin(), g.frames.end());
  g.frames.erase(std::unique(g.frames.begin(), g.frames.end()), g.frames.end());
  if (!j.contains("tiers") || !j["tiers"].is_array() || j["tiers"].empty())
    throw InputError(where, "field 'tiers' must be a non-empty array");
  for (const auto& tj : j["tiers"]) {
    Tier t;
    t.name = get<std::string>(tj, where, "name");
    if (!tj.contains("sizes") || !tj["sizes"].is_object() || tj["sizes"].empty())
      throw InputError(where, "tier '" + t.name + "' needs a non-empty 'sizes' object");
    for (auto& [ratio, hw] : tj["sizes"].items()) {
      if (!hw.is_array() || hw.size() != 2 || !hw[0].is_number_integer() ||
          !hw[1].is_number_integer())
        throw InputError(where,
                         "tier '" + t.name + "' size '" + ratio + "' must be [height, width]");
      const std::string what = "tier '" + t.name + "' size '" + ratio + "'";
      TierSize s{ratio, int(int_value(hw[0], where, what + " height", 1, kMaxSide)),
                 int(int_value(hw[1], where, what + " width", 1, kMaxSide))};
      t.sizes.push_back(s);
    }
    g.tiers.push_back(std::move(t));
  }
  std::stable_sort(g.tiers.begin(), g.tiers.end(),
                   [](const Tier& a, const Tier& b) { return a.area() < b.area(); });
  if (j.contains("fixed_batch_sizes"))
    g.fixed_batch_sizes = parse_fixed(j["fixed_batch_sizes"], where);
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
