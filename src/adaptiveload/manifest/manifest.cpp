#include "adaptiveload/manifest/manifest.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "adaptiveload/presets/presets.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {
namespace {

// Limits beyond which a value is taken as a typo rather than media.
constexpr int64_t kMaxFrames = 10'000'000;  // ~4 days at 30 fps
constexpr int64_t kMaxSide = 65'536;
constexpr double kMaxFps = 1000;
constexpr double kMinFps = 1e-3;  // one frame per 1000 s; below that the resampled length overflows

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Parses a positive integer field; returns an empty string on success, else the reason.
std::string parse_int(std::string_view s, int64_t max, int64_t& out) {
  s = trim(s);
  if (s.empty()) return "missing value";
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p != s.data() + s.size()) {
    // Accept integral floats such as "220.0" that spreadsheet exports write.
    double d = 0;
    auto [q, ec2] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec2 != std::errc() || q != s.data() + s.size() || d != std::floor(d) || !std::isfinite(d))
      return "'" + std::string(s) + "' is not an integer";
    if (std::fabs(d) > 9e15) return "'" + std::string(s) + "' is out of range";
    out = int64_t(d);
  }
  if (out <= 0) return "must be positive, got " + std::string(s);
  if (out > max) return std::string(s) + " is implausibly large (limit " + std::to_string(max) + ")";
  return "";
}

std::string parse_fps(std::string_view s, int64_t num_frames, double& out) {
  s = trim(s);
  if (s.empty()) {
    out = 0;
    return num_frames == 1 ? "" : "missing for a video (num_frames > 1); give the clip's frame rate";
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(out))
    return "'" + std::string(s) + "' is not a number";
  if (out <= 0) return "must be positive, got " + std::string(s);
  if (out > kMaxFps) return std::string(s) + " is implausibly large (limit 1000)";
  if (out < kMinFps)
    return std::string(s) + " is implausibly small (limit 0.001 frames per second)";
  return "";
}

enum Column { kPath, kFrames, kHeight, kWidth, kFps, kColumns };
const char* const kColumnNames[kColumns] = {"path", "num_frames", "height", "width", "fps"};

}  // namespace

std::string BadRow::message() const {
  return file + ":" + std::to_string(line) + ": field '" + field + "': " + reason;
}

std::string_view Manifest::path(int64_t row) const {
  size_t i = size_t(row);
  size_t begin = i == 0 ? 0 : path_end_[i - 1];
  return std::string_view(path_pool_).substr(begin, path_end_[i] - begin);
}

std::string Manifest::where(int64_t row) const {
  for (const auto& f : files_) {
    if (row >= f.first_row && row < f.first_row + f.rows)
      return f.path + ":" + std::to_string(lines_[size_t(row)]);
  }
  return "row " + std::to_string(row);
}

void Manifest::push(std::string_view path, const ClipInfo& c, bool ok, int64_t line) {
  clips_.push_back(ok ? c : ClipInfo{});
  usable_.push_back(ok ? 1 : 0);
  lines_.push_back(line);
  path_pool_.append(path);
  path_end_.push_back(path_pool_.size());
  if (!files_.empty()) ++files_.back().rows;
}

bool Manifest::add_row(const std::string& path, const std::string& num_frames, const std::string& height,
                       const std::string& width, const std::string& fps, const std::string& source,
                       int64_t line, BadRowPolicy policy) {
  if (files_.empty() || files_.back().path != source) files_.push_back({source, total_rows(), 0});
  ClipInfo c;
  int64_t h = 0, w = 0;
  std::string field, reason;
  if (trim(path).empty()) {
    field = "path", reason = "missing value";
  } else if (!(reason = parse_int(num_frames, kMaxFrames, c.num_frames)).empty()) {
    field = "num_frames";
  } else if (!(reason = parse_int(height, kMaxSide, h)).empty()) {
    field = "height";
  } else if (!(reason = parse_int(width, kMaxSide, w)).empty()) {
    field = "width";
  } else if (!(reason = parse_fps(fps, c.num_frames, c.fps)).empty()) {
    field = "fps";
  }
  c.height = int32_t(h), c.width = int32_t(w);
  bool ok = field.empty();
  if (!ok) {
    BadRow bad{source, line, field, reason};
    if (policy == BadRowPolicy::kError)
      throw InputError(source + ":" + std::to_string(line),
                       "field '" + field + "': " + reason + " (fix the row, or pass --on-bad-row=skip to skip bad rows)");
    bad_rows_.push_back(std::move(bad));
  }
  push(path, c, ok, line);
  return ok;
}

void Manifest::load(const std::string& path, BadRowPolicy policy) {
  load_text(read_file(path), path, policy);
}

void Manifest::load_text(std::string_view text, const std::string& name, BadRowPolicy policy) {
  auto ends_with = [&](const char* suffix) {
    std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  bool jsonl = ends_with(".jsonl") || ends_with(".ndjson") || ends_with(".json");
  if (!jsonl && !ends_with(".csv")) {
    size_t i = text.find_first_not_of(" \t\r\n");
    jsonl = i != std::string_view::npos && text[i] == '{';
  }
  files_.push_back({name, total_rows(), 0});
  if (jsonl) {
    load_jsonl(text, name, policy);
  } else {
    load_csv(text, name, policy);
  }
}

void Manifest::load_csv(std::string_view text, const std::string& name, BadRowPolicy policy) {
  size_t pos = 0;
  int64_t lines = 0;
  std::vector<std::string> fields;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") pos = 3;  // UTF-8 byte-order mark
  if (!next_csv_record(text, pos, fields, lines, name)) throw InputError(name, "empty manifest (no header row)");
  int col[kColumns];
  for (int k = 0; k < kColumns; ++k) {
    col[k] = -1;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (trim(fields[i]) != kColumnNames[k]) continue;
      // Two columns of the same name: which one holds the value is a guess, so refuse.
      if (col[k] >= 0)
        throw InputError(name + ":1", std::string("header has the column '") + kColumnNames[k] +
                                          "' twice (columns " + std::to_string(col[k] + 1) +
                                          " and " + std::to_string(i + 1) +
                                          "); remove or rename one of them");
      col[k] = int(i);
    }
    if (col[k] < 0 && k != kFps)
      throw InputError(name + ":1", std::string("header has no '") + kColumnNames[k] +
                                        "' column; expected columns path,num_frames,height,width,fps");
  }
  static const std::string empty;
  while (true) {
    int64_t line = lines + 1;
    if (!next_csv_record(text, pos, fields, lines, name)) break;
    if (fields.size() == 1 && trim(fields[0]).empty()) continue;  // blank line
    auto field = [&](int k) -> const std::string& {
      return col[k] >= 0 && size_t(col[k]) < fields.size() ? fields[size_t(col[k])] : empty;
    };
    add_row(field(kPath), field(kFrames), field(kHeight), field(kWidth), field(kFps), name, line, policy);
  }
}

void Manifest::load_jsonl(std::string_view text, const std::string& name, BadRowPolicy policy) {
  using json = nlohmann::json;
  size_t pos = 0;
  int64_t line = 0;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") pos = 3;  // UTF-8 byte-order mark
  while (pos < text.size()) {
    // Lines end in LF, CRLF or a lone CR (a JSON string cannot hold a raw CR or LF).
    size_t end = text.find_first_of("\r\n", pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view s = trim(text.substr(pos, end - pos));
    pos = end + (end + 1 < text.size() && text[end] == '\r' && text[end + 1] == '\n' ? 2 : 1);
    ++line;
    if (s.empty()) continue;
    json j;
    std::string field = "(row)", reason;
    // Duplicate keys are refused: nlohmann keeps the last copy, which silently picks one.
    std::vector<std::vector<std::string>> keys;  // keys seen per open object
    auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
      (void)depth;
      if (event == json::parse_event_t::object_start) {
        keys.emplace_back();
      } else if (event == json::parse_event_t::object_end) {
        keys.pop_back();
      } else if (event == json::parse_event_t::key && !keys.empty()) {
        const std::string k = parsed.get<std::string>();
        if (reason.empty() &&
            std::find(keys.back().begin(), keys.back().end(), k) != keys.back().end()) {
          field = k;
          reason = "key '" + k + "' appears twice in the object; keep one";
        }
        keys.back().push_back(k);
      }
      return true;
    };
    try {
      j = json::parse(s, on_event);
      if (reason.empty() && !j.is_object()) reason = "line is not a JSON object";
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number overflow (1e400)
      field = "(row)";
      reason = std::string("not valid JSON (") + e.what() + ")";
    }
    // Numbers and strings holding numbers are both accepted; any other type is a bad row.
    auto text_of = [&](const char* key, bool is_path) -> std::string {
      if (!reason.empty() || !j.contains(key) || j[key].is_null()) return "";
      const json& v = j[key];
      if (v.is_string()) return v.get<std::string>();
      if (!is_path) {
        if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
        if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
        if (v.is_number()) {
          char buf[64];
          auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v.get<double>());
          return std::string(buf, p);
        }
      }
      field = key;
      reason = std::string("must be ") +
               (is_path ? "a string" : "a number or a string holding a number") + ", got " +
               (v.is_array() || v.is_object() ? "an " : "a ") + v.type_name();
      return "";
    };
    std::string path = text_of("path", true), frames = text_of("num_frames", false),
                height = text_of("height", false), width = text_of("width", false),
                fps = text_of("fps", false);
    if (!reason.empty()) {
      if (policy == BadRowPolicy::kError)
        throw InputError(name + ":" + std::to_string(line),
                         (field == "(row)" ? "" : "field '" + field + "': ") + reason +
                             " (fix the row, or pass --on-bad-row=skip)");
      bad_rows_.push_back({name, line, field, reason});
      push("", ClipInfo{}, false, line);
      continue;
    }
    add_row(path, frames, height, width, fps, name, line, policy);
  }
}

}  // namespace adaptiveload
