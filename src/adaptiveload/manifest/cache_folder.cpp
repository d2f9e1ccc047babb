#include "adaptiveload/manifest/cache_folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

constexpr std::string_view kExt = ".safetensors";
constexpr uint64_t kMaxHeader = uint64_t(100) << 20;  // safetensors' own header limit
// musubi-tuner videos: Wan's training rate. A fixed row is not resampled; fps is informational.
constexpr const char* kMusubiVideoFps = "16";

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int64_t to_int(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() ? v : -1;
}

// "<a>x<b>" with both parts digits.
bool parse_pair(std::string_view s, int64_t& a, int64_t& b) {
  const size_t x = s.find('x');
  if (x == std::string_view::npos || !all_digits(s.substr(0, x)) || !all_digits(s.substr(x + 1)))
    return false;
  a = to_int(s.substr(0, x)), b = to_int(s.substr(x + 1));
  return a > 0 && b > 0;
}

std::vector<std::string> list_files(const std::string& dir) {
  std::vector<std::string> out;
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (!d) throw InputError(dir, "cannot list the cache folder");
  while (dirent* e = readdir(d.get())) out.emplace_back(e->d_name);
  std::sort(out.begin(), out.end());
  return out;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The safetensors header (8-byte little-endian length, then that many bytes of JSON), checked
// against the file's size: a truncated file does not read as valid.
nlohmann::json read_header(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) throw InputError(path, "cannot open the file");
  unsigned char len8[8];
  if (std::fread(len8, 1, 8, f.get()) != 8)
    throw InputError(path, "not a safetensors file: shorter than 8 bytes");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len8[i];
  if (n < 2 || n > kMaxHeader)
    throw InputError(path, "not a safetensors file: header length " + std::to_string(n));
  std::string text(size_t(n), '\0');
  if (std::fread(text.data(), 1, size_t(n), f.get()) != size_t(n))
    throw InputError(path, "truncated: the file ends inside its safetensors header");
  nlohmann::json h = nlohmann::json::parse(text, nullptr, false);
  if (!h.is_object())
    throw InputError(path, "not a safetensors file: its header is not a JSON object");
  uint64_t end = 0;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& off = it.value().is_object() ? it.value().value("data_offsets", nlohmann::json())
                                             : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[1].is_number_unsigned())
      throw InputError(path, "safetensors header: tensor '" + it.key() + "' has no data_offsets");
    end = std::max(end, off[1].get<uint64_t>());
  }
  std::fseek(f.get(), 0, SEEK_END);
  const long size = std::ftell(f.get());
  if (size < 0 || uint64_t(size) < 8 + n + end)
    throw InputError(path, "truncated: " + std::to_string(size) + " bytes, its header describes " +
                               std::to_string(8 + n + end));
  return h;
}

void load_index(Manifest& m, const std::string& dir, BadRowPolicy policy) {
  const int64_t first = m.total_rows();
  m.load(dir + "/" + kCacheIndexName, policy);
  m.mark_fixed(first, m.total_rows());
}

// One musubi-tuner latent file as a row; a bad one is recorded (or thrown under kError).
void add_musubi_row(Manifest& m, const std::string& dir, const std::string& name,
                    const MusubiName& mn, int64_t line, BadRowPolicy policy) {
  const std::string path = dir + "/" + name;
  auto bad = [&](const std::string& field, const std::string& reason) {
    m.add_bad_row(path, dir, line, field, reason, policy);
  };
  int st = 0, sh = 0, sw = 0;
  if (!musubi_vae_strides(mn.arch, st, sh, sw))
    return bad("name", "architecture '" + mn.arch + "' has no known VAE strides (known: wan, hv)");
  const std::string te = dir + "/" + mn.item_key + "_" + mn.arch + "_te.safetensors";
  if (!file_exists(te)) return bad("text encoder", "no text-encoder output file " + te);
  MusubiLatent lat;
  try {
    lat = read_musubi_latent(path);
  } catch (const InputError& e) {
    return bad("latents", e.what());
  }
  const int64_t frames = mn.frames > 0 ? mn.frames : 1;
  if (lat.frames != 1 + (frames - 1) / st)
    return bad("latents", "the latent " + lat.key + " has " + std::to_string(lat.frames) +
                              " frames; the name's " + std::to_string(frames) + " frames give " +
                              std::to_string(1 + (frames - 1) / st));
  m.add_row(path, std::to_string(frames), std::to_string(lat.height * sh),
            std::to_string(lat.width * sw), frames > 1 ? kMusubiVideoFps : "", dir, line, policy);
}

void load_musubi(Manifest& m, const std::string& dir, BadRowPolicy policy) {
  const int64_t first = m.total_rows();
  int64_t line = 0;
  for (const std::string& name : list_files(dir)) {
    MusubiName mn;
    if (!parse_musubi_name(name, mn)) continue;
    add_musubi_row(m, dir, name, mn, ++line, policy);
  }
  if (line == 0)
    throw InputError(
        dir, std::string("a folder given as a manifest must be a latent cache: it has neither ") +
                 kCacheIndexName +
                 " (python -m adaptiveload.cache) nor musubi-tuner latent files "
                 "(<name>_<W>x<H>_wan.safetensors)");
  m.mark_fixed(first, m.total_rows());
}

}  // namespace

bool is_directory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool musubi_vae_strides(const std::string& arch, int& t, int& h, int& w) {
  if (arch != "wan" && arch != "hv") return false;
  t = 4, h = 8, w = 8;
  return true;
}

bool parse_musubi_name(std::string_view file, MusubiName& out) {
  if (file.size() <= kExt.size() || file.substr(file.size() - kExt.size()) != kExt) return false;
  std::string_view stem = file.substr(0, file.size() - kExt.size());
  std::vector<std::string_view> tok;
  for (size_t b = 0;;) {
    const size_t u = stem.find('_', b);
    tok.push_back(stem.substr(b, u == std::string_view::npos ? std::string_view::npos : u - b));
    if (u == std::string_view::npos) break;
    b = u + 1;
  }
  if (tok.size() < 3 || tok.back() == "te") return false;
  MusubiName r;
  r.arch = std::string(tok.back());
  if (!parse_pair(tok[tok.size() - 2], r.width, r.height)) return false;
  size_t key_end = tok.size() - 2;
  // A video window: "<start>-<frames>" or "<start>-<frames>-<section>", digits.
  const std::string_view w = tok[tok.size() - 3];
  const size_t d1 = w.find('-');
  if (tok.size() >= 4 && d1 != std::string_view::npos) {
    const std::string_view rest = w.substr(d1 + 1);
    const size_t d2 = rest.find('-');
    const std::string_view frames = rest.substr(0, d2);
    if (all_digits(w.substr(0, d1)) && all_digits(frames) &&
        (d2 == std::string_view::npos || all_digits(rest.substr(d2 + 1)))) {
      r.frame_start = to_int(w.substr(0, d1)), r.frames = to_int(frames);
      if (r.frames <= 0) return false;
      key_end = tok.size() - 3;
    }
  }
  for (size_t i = 0; i < key_end; ++i) r.item_key += (i ? "_" : "") + std::string(tok[i]);
  if (r.item_key.empty()) return false;
  out = std::move(r);
  return true;
}

MusubiLatent read_musubi_latent(const std::string& path) {
  const nlohmann::json h = read_header(path);
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& k = it.key();
    if (k.rfind("latents_", 0) != 0) continue;
    // latents_<f>x<h>x<w>_<dtype>: the dims part must be three numbers (not image_ / control_).
    const size_t u = k.find('_', 8);
    if (u == std::string::npos) continue;
    const std::string dims = k.substr(8, u - 8);
    int64_t f = 0;
    const size_t x = dims.find('x');
    if (x == std::string::npos || !all_digits(dims.substr(0, x))) continue;
    f = to_int(dims.substr(0, x));
    int64_t hh = 0, ww = 0;
    if (!parse_pair(dims.substr(x + 1), hh, ww)) continue;
    MusubiLatent l;
    l.key = k, l.dtype = k.substr(u + 1);
    const auto& shape = it.value().value("shape", nlohmann::json());
    if (!shape.is_array() || shape.size() != 4)
      throw InputError(path,
                       "tensor " + k + " is not [C, frames, height, width]: shape " + shape.dump());
    l.channels = shape[0].get<int64_t>(), l.frames = shape[1].get<int64_t>();
    l.height = shape[2].get<int64_t>(), l.width = shape[3].get<int64_t>();
    if (l.frames != f || l.height != hh || l.width != ww)
      throw InputError(path,
                       "tensor " + k + " has shape " + shape.dump() + ", not what its name says");
    return l;
  }
  throw InputError(
      path,
      "no latents_<f>x<h>x<w>_<dtype> tensor in the file (not a musubi-tuner latent cache file)");
}

void load_cache_folder(Manifest& m, const std::string& dir, BadRowPolicy policy) {
  if (file_exists(dir + "/" + kCacheIndexName)) return load_index(m, dir, policy);
  load_musubi(m, dir, policy);
}

}  // namespace adaptiveload
