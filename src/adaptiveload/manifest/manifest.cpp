#include "adaptiveload/manifest/manifest.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "adaptiveload/manifest/cache_folder.h"
#include "adaptiveload/manifest/file_text.h"
#include "adaptiveload/manifest/reader_util.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {
namespace {

// Limits beyond which a value is taken as a typo rather than media.
constexpr int64_t kMaxFrames = 10'000'000;  // ~4 days at 30 fps
constexpr int64_t kMaxSide = 65'536;
constexpr double kMaxFps = 1000;
constexpr double kMinFps = 1e-3;  // one frame per 1000 s; below that the resampled length overflows
// Path references: 40-bit offsets (texts below kExtraBase, copied paths from it), 24-bit lengths.
constexpr uint64_t kExtraBase = uint64_t(1) << 39;
constexpr size_t kMaxPathBytes = (size_t(1) << 24) - 1;

// Plain digits: the common case, without from_chars' generality. Returns false otherwise.
bool parse_digits(std::string_view s, int64_t& out) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char ch : s) {
    const unsigned d = unsigned(ch) - '0';
    if (d > 9) return false;
    v = v * 10 + int64_t(d);
  }
  out = v;
  return true;
}

// Parses a positive integer field; returns an empty string on success, else the reason.
std::string parse_int(std::string_view s, int64_t max, int64_t& out) {
  s = trim(s);
  if (s.empty()) return "missing value";
  if (!parse_digits(s, out)) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec != std::errc() || p != s.data() + s.size()) {
      // Accept integral floats such as "220.0" that spreadsheet exports write.
      double d = 0;
      auto [q, ec2] = std::from_chars(s.data(), s.data() + s.size(), d);
      // A number past what a double holds (1e309) is out of range, not "not an integer".
      if (ec2 == std::errc::result_out_of_range && q == s.data() + s.size())
        return "'" + std::string(s) + "' is out of range";
      if (ec2 != std::errc() || q != s.data() + s.size() || d != std::floor(d) || !std::isfinite(d))
        return "'" + std::string(s) + "' is not an integer";
      if (std::fabs(d) > 9e15) return "'" + std::string(s) + "' is out of range";
      out = int64_t(d);
    }
  }
  if (out <= 0) return "must be positive, got " + std::string(s);
  if (out > max)
    return std::string(s) + " is implausibly large (limit " + std::to_string(max) + ")";
  return {};
}

// "ddd" or "ddd.ddd" with at most 15 digits: an exact integer over an exact power of ten, so
// the one rounded division gives the correctly rounded value, as from_chars would.
bool parse_decimal(std::string_view s, double& out) {
  static const double kPow10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                  1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
  int64_t m = 0;
  int digits = 0, frac = -1;
  for (char ch : s) {
    if (ch == '.') {
      if (frac >= 0 || digits == 0) return false;
      frac = 0;
      continue;
    }
    const unsigned d = unsigned(ch) - '0';
    if (d > 9 || ++digits > 15) return false;
    m = m * 10 + int64_t(d);
    if (frac >= 0) ++frac;
  }
  if (digits == 0 || frac == 0) return false;
  out = double(m) / kPow10[frac < 0 ? 0 : frac];
  return true;
}

std::string parse_fps(std::string_view s, int64_t num_frames, double& out) {
  s = trim(s);
  if (s.empty()) {
    out = 0;
    if (num_frames == 1) return {};
    return "missing for a video (num_frames > 1); give the clip's frame rate";
  }
  if (!parse_decimal(s, out)) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec == std::errc::result_out_of_range && p == s.data() + s.size())  // 1e309, 1e-400
      return "'" + std::string(s) + "' is out of range";
    if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(out))
      return "'" + std::string(s) + "' is not a number";
  }
  if (out <= 0) return "must be positive, got " + std::string(s);
  if (out > kMaxFps) return std::string(s) + " is implausibly large (limit 1000)";
  if (out < kMinFps)
    return std::string(s) + " is implausibly small (limit 0.001 frames per second)";
  return {};
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

std::string BadRow::message() const {
  return file + ":" + std::to_string(line) + ": field '" + field + "': " + reason;
}

std::string_view Manifest::path(int64_t row) const { return text_at(path_ref_[size_t(row)]); }

std::string_view Manifest::caption(int64_t row) const {
  return caption_ref_.empty() ? std::string_view() : text_at(caption_ref_[size_t(row)]);
}

std::string_view Manifest::text_at(uint64_t ref) const {
  const uint64_t off = ref >> 24;
  const size_t len = size_t(ref & kMaxPathBytes);
  if (off >= kExtraBase) return std::string_view(extra_).substr(size_t(off - kExtraBase), len);
  const size_t k =
      size_t(std::upper_bound(text_base_.begin(), text_base_.end(), off) - text_base_.begin()) - 1;
  return texts_[k].view().substr(size_t(off - text_base_[k]), len);
}

int64_t Manifest::line(int64_t row) const {
  auto it = std::upper_bound(
      line_runs_.begin(), line_runs_.end(), row,
      [](int64_t r, const std::pair<int64_t, int64_t>& run) { return r < run.first; });
  if (it == line_runs_.begin()) return 0;
  --it;
  return it->second + (row - it->first);
}

std::string Manifest::where(int64_t row) const {
  for (const auto& f : files_) {
    if (row >= f.first_row && row < f.first_row + f.rows)
      return f.path + ":" + std::to_string(line(row));
  }
  return "row " + std::to_string(row);
}

uint64_t Manifest::text_ref(std::string_view s) {
  // A slice of the text being read is referenced; anything else is copied.
  uint64_t off = 0;
  const std::string_view text = texts_.empty() ? std::string_view() : texts_.back().view();
  const auto at = reinterpret_cast<uintptr_t>(s.data());
  if (!text.empty() && !s.empty() && at >= reinterpret_cast<uintptr_t>(text.data()) &&
      at + s.size() <= reinterpret_cast<uintptr_t>(text.data()) + text.size()) {
    off = text_base_.back() + (at - reinterpret_cast<uintptr_t>(text.data()));
  } else {
    off = kExtraBase + extra_.size();
    extra_.append(s);
  }
  return off << 24 | uint64_t(s.size());
}

void Manifest::push(std::string_view path, const ClipInfo& c, bool ok, int64_t line,
                    std::string_view caption) {
  Row r;
  if (ok) r = Row{int32_t(c.num_frames), uint16_t(c.height - 1), uint16_t(c.width - 1), c.fps};
  const int64_t row = total_rows();
  rows_.push_back(r);
  if (line_runs_.empty() || line_runs_.back().second + (row - line_runs_.back().first) != line)
    line_runs_.emplace_back(row, line);
  path_ref_.push_back(text_ref(path));
  // The caption store starts at the first caption (earlier rows: none, reference 0).
  if (caption.size() > kMaxPathBytes) caption = {};  // a bad row (parse_fields said why)
  if (!caption.empty() || !caption_ref_.empty()) {
    caption_ref_.resize(size_t(row), 0);
    caption_ref_.push_back(caption.empty() ? 0 : text_ref(caption));
  }
  if (!files_.empty()) ++files_.back().rows;
}

bool Manifest::parse_fields(const Fields& f, ClipInfo& c, std::string& field, std::string& reason) {
  int64_t h = 0, w = 0;
  if (trim(f.path).empty()) {
    field = "path", reason = "missing value";
  } else if (f.path.size() > kMaxPathBytes) {
    field = "path", reason = std::to_string(f.path.size()) + " bytes is implausibly long (limit " +
                             std::to_string(kMaxPathBytes) + ")";
  } else if (!(reason = parse_int(f.frames, kMaxFrames, c.num_frames)).empty()) {
    field = "num_frames";
  } else if (!(reason = parse_int(f.height, kMaxSide, h)).empty()) {
    field = "height";
  } else if (!(reason = parse_int(f.width, kMaxSide, w)).empty()) {
    field = "width";
  } else if (!(reason = parse_fps(f.fps, c.num_frames, c.fps)).empty()) {
    field = "fps";
  } else if (f.caption.size() > kMaxPathBytes) {
    field = "caption", reason = std::to_string(f.caption.size()) +
                                " bytes is implausibly long (limit " +
                                std::to_string(kMaxPathBytes) + ")";
  }
  c.height = int32_t(h), c.width = int32_t(w);
  return field.empty();
}

bool Manifest::add_fields(const Fields& f, const std::string& source, int64_t line,
                          BadRowPolicy policy) {
  ClipInfo c;
  std::string field, reason;
  const bool ok = parse_fields(f, c, field, reason);
  if (!ok) {
    if (policy == BadRowPolicy::kError)
      throw InputError(source + ":" + std::to_string(line),
                       "field '" + field + "': " + reason + " (fix the row, or pass " +
                           option_word("on_bad_row", "skip", Spelling::kEquals) +
                           " to skip bad rows)");
    bad_rows_.push_back({source, line, field, reason});
  }
  // A bad row keeps its path too (it is part of the fingerprint), unless it is too long to.
  push(f.path.size() <= kMaxPathBytes ? f.path : std::string_view(), c, ok, line, f.caption);
  return ok;
}

bool Manifest::add_row(const std::string& path, const std::string& num_frames,
                       const std::string& height, const std::string& width, const std::string& fps,
                       const std::string& source, int64_t line, BadRowPolicy policy,
                       const std::string& caption) {
  if (files_.empty() || files_.back().path != source) files_.push_back({source, total_rows(), 0});
  return add_fields({path, num_frames, height, width, fps, caption}, source, line, policy);
}

void Manifest::add_bad_row(const std::string& path, const std::string& source, int64_t line,
                           const std::string& field, const std::string& reason,
                           BadRowPolicy policy) {
  if (policy == BadRowPolicy::kError)
    throw InputError(path, field + ": " + reason + " (fix or remove the file, or pass " +
                               option_word("on_bad_row", "skip", Spelling::kEquals) +
                               " to skip it)");
  if (files_.empty() || files_.back().path != source) files_.push_back({source, total_rows(), 0});
  bad_rows_.push_back({path, line, field, reason});
  const std::string_view kept = path.size() <= kMaxPathBytes ? std::string_view(path) : "";
  push(kept, ClipInfo{}, false, line);
}

void Manifest::load(const std::string& path, BadRowPolicy policy, FileAccess access) {
  if (is_directory(path)) return load_cache_folder(*this, path, policy);
  if (access == FileAccess::kMap) {
    if (std::optional<Text> t = map_file(path)) return load_owned(std::move(*t), path, policy);
  }
  load_owned(read_whole_file(path), path, policy);
}

void Manifest::mark_fixed(int64_t first, int64_t end) {
  if (end <= first) return;
  if (!fixed_runs_.empty() && fixed_runs_.back().second == first)
    fixed_runs_.back().second = end;
  else
    fixed_runs_.emplace_back(first, end);
}

bool Manifest::fixed(int64_t row) const {
  if (fixed_runs_.empty()) return false;
  auto it = std::upper_bound(
      fixed_runs_.begin(), fixed_runs_.end(), row,
      [](int64_t r, const std::pair<int64_t, int64_t>& run) { return r < run.first; });
  return it != fixed_runs_.begin() && row < (it - 1)->second;
}

void Manifest::load_text(std::string_view text, const std::string& name, BadRowPolicy policy) {
  Text t;
  t.hold = big_buffer(text.size());
  if (!text.empty()) memcpy(t.hold.get(), text.data(), text.size());
  t.size = text.size();
  load_owned(std::move(t), name, policy);
}

void Manifest::load_owned(Text owned, const std::string& name, BadRowPolicy policy) {
  const uint64_t base = text_base_.empty() ? 0 : text_base_.back() + texts_.back().size;
  if (base + owned.size >= kExtraBase)
    throw InputError(
        name, "manifests of more than 512 GiB in total are not supported; split the dataset");
  if (const std::string why = encoding_problem(owned.view(), name); !why.empty())
    throw InputError(name, "the manifest " + why);
  texts_.push_back(std::move(owned));
  text_base_.push_back(base);
  const std::string_view text = texts_.back().view();
  bool jsonl = ends_with(name, ".jsonl") || ends_with(name, ".ndjson") || ends_with(name, ".json");
  if (!jsonl && !ends_with(name, ".csv")) {
    // Sniffed past a UTF-8 byte-order mark, which both readers skip.
    const size_t bom = text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
    size_t i = text.find_first_not_of(" \t\r\n", bom);
    jsonl = i != std::string_view::npos && text[i] == '{';
  }
  // One row per line, about: reserving avoids the doubling copies of 10^7-row vectors.
  const size_t lines = 1 + count_newlines(text);
  rows_.reserve(rows_.size() + lines);
  path_ref_.reserve(path_ref_.size() + lines);
  files_.push_back({name, total_rows(), 0});
  if (jsonl) {
    load_jsonl(text, name, policy);
  } else {
    load_csv(text, name, policy);
  }
  // A text without rows need not be kept.
  if (files_.back().rows == 0) texts_.back().hold.reset();
}

namespace {
// Finds the CSV reader's special bytes (',', '\n', '\r', '"') 64 at a time: one bit mask per
// 64-byte block (16 bytes a compare where SSE2 is there, i.e. every x86-64), then one bit
// scan per special byte, so a row costs about one block and a scan per field.
class SpecialScanner {
 public:
  SpecialScanner(const char* t, size_t n) : t_(t), n_(n) {}
  // Index of the first special byte in [pos, n), or n.
  size_t next(size_t pos) {
    while (pos < n_) {
      const size_t b = pos & ~size_t(63);
      if (b != block_) block_ = b, mask_ = block_mask(b);
      const uint64_t m = mask_ & (~uint64_t(0) << (pos - b));
      if (m != 0) return b + size_t(__builtin_ctzll(m));
      pos = b + 64;
    }
    return n_;
  }

 private:
  uint64_t block_mask(size_t b) const {
    const char* src = t_ + b;
    char tail[64];
    if (n_ - b < 64) {  // the last, partial block: zero bytes are not special
      memset(tail, 0, sizeof tail);
      memcpy(tail, src, n_ - b);
      src = tail;
    }
    uint64_t m = 0;
#if defined(__SSE2__)
    const __m128i comma = _mm_set1_epi8(','), lf = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r'),
                  quote = _mm_set1_epi8('"');
    for (int k = 0; k < 4; ++k) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16 * k));
      const __m128i hit =
          _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, comma), _mm_cmpeq_epi8(v, lf)),
                       _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, quote)));
      m |= uint64_t(uint32_t(_mm_movemask_epi8(hit))) << (16 * k);
    }
#else
    for (int k = 0; k < 64; ++k) {
      const char c = src[k];
      if (c == ',' || c == '\n' || c == '\r' || c == '"') m |= uint64_t(1) << k;
    }
#endif
    return m;
  }

  const char* t_;
  size_t n_;
  size_t block_ = ~size_t(0);
  uint64_t mask_ = 0;
};

}  // namespace

// The common row, without building messages: a path without surrounding blanks, plain
// digits, a plain decimal fps (or none for an image), every value in range. Anything else
// returns false and goes through add_fields, which accepts the same rows with the same
// values and explains the others.
bool Manifest::add_plain(const Fields& f, int64_t line) {
  const std::string_view p = f.path;
  if (p.empty() || p.size() > kMaxPathBytes || blank(p.front()) || blank(p.back())) return false;
  if (f.caption.size() > kMaxPathBytes) return false;
  int64_t frames = 0, h = 0, w = 0;
  if (!parse_digits(f.frames, frames) || frames <= 0 || frames > kMaxFrames) return false;
  if (!parse_digits(f.height, h) || h <= 0 || h > kMaxSide) return false;
  if (!parse_digits(f.width, w) || w <= 0 || w > kMaxSide) return false;
  double fps = 0;
  if (f.fps.empty()) {
    if (frames != 1) return false;
  } else if (!parse_decimal(f.fps, fps) || !(fps > 0) || fps > kMaxFps || fps < kMinFps) {
    return false;
  }
  push(p, ClipInfo{frames, int32_t(h), int32_t(w), fps}, true, line, f.caption);
  return true;
}

void Manifest::load_csv(std::string_view text, const std::string& name, BadRowPolicy policy) {
  size_t pos = 0;
  int64_t lines = 0;
  std::vector<std::string> fields;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") pos = 3;  // UTF-8 byte-order mark
  if (!next_csv_record(text, pos, fields, lines, name))
    throw InputError(name, "empty manifest (no header row)");
  // A row with more fields than the header is refused: its values would be read from the
  // wrong columns (an unquoted comma in a path moves every field after it). Fewer fields are
  // missing values, as in pandas and Python's csv.DictReader.
  const size_t header_fields = fields.size();
  int col[kColumns];
  for (int k = 0; k < kColumns; ++k) {
    col[k] = -1;
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::string_view h = trim(fields[i]);
      if (h != kColumnNames[k] && !(k == kCaption && h == kCaptionAlias)) continue;
      // Two columns of the same name (or a caption and a text): which one holds the value is a
      // guess, so refuse.
      if (col[k] >= 0) {
        const std::string first(trim(fields[size_t(col[k])])),
            cols = std::to_string(col[k] + 1) + " and " + std::to_string(i + 1);
        if (first == h)
          throw InputError(name + ":1", "header has the column '" + first + "' twice (columns " +
                                            cols + "); remove or rename one of them");
        throw InputError(name + ":1",
                         "header has both '" + first + "' and '" + std::string(h) + "' (columns " +
                             cols + "), two names of the caption; remove or rename one of them");
      }
      col[k] = int(i);
    }
    if (col[k] < 0 && k < kFps)
      throw InputError(name + ":1",
                       std::string("header has no '") + kColumnNames[k] +
                           "' column; expected columns path,num_frames,height,width,fps");
  }
  std::vector<std::string_view> slow_views;
  // Rows of up to kFast fields, none quoted, are split in place; any other row is read again
  // by the full RFC 4180 reader (its fields are copies).
  constexpr size_t kFast = 64;
  std::string_view views[kFast];
  const char* const t = text.data();
  const size_t n = text.size();
  SpecialScanner scan(t, n);
  while (pos < n) {
    const int64_t line = lines + 1;
    const size_t start = pos;
    size_t fb = pos, nf = 0;
    bool slow = false;
    while (true) {
      pos = scan.next(pos);
      if (nf == kFast) {
        slow = true;
        break;
      }
      if (pos == n) {
        views[nf++] = std::string_view(t + fb, pos - fb);
        ++lines;
        break;
      }
      const char c = t[pos];
      if (c == ',') {
        views[nf++] = std::string_view(t + fb, pos - fb);
        fb = ++pos;
      } else if (c == '"') {
        slow = true;
        break;
      } else {  // '\n', '\r\n' or a lone '\r'
        views[nf++] = std::string_view(t + fb, pos - fb);
        pos += c == '\r' && pos + 1 < n && t[pos + 1] == '\n' ? 2 : 1;
        ++lines;
        break;
      }
    }
    const std::string_view* v = views;
    if (slow) {
      lines = line - 1;
      pos = start;
      next_csv_record(text, pos, fields, lines, name);
      slow_views.assign(fields.begin(), fields.end());
      v = slow_views.data();
      nf = slow_views.size();
    }
    if (nf == 1 && trim(v[0]).empty()) continue;  // blank line
    if (nf > header_fields) {
      const std::string reason = "has " + std::to_string(nf) + " fields, the header " +
                                 std::to_string(header_fields) +
                                 ": quote a value that holds a comma (\"clips/a,b.mp4\")";
      if (policy == BadRowPolicy::kError)
        throw InputError(name + ":" + std::to_string(line),
                         "row " + reason + " (fix the row, or pass " +
                             option_word("on_bad_row", "skip", Spelling::kEquals) + ")");
      bad_rows_.push_back({name, line, "(row)", reason});
      push("", ClipInfo{}, false, line);
      continue;
    }
    auto field = [&](int k) -> std::string_view {
      return col[k] >= 0 && size_t(col[k]) < nf ? v[size_t(col[k])] : std::string_view();
    };
    const Fields f{field(kPath),  field(kFrames), field(kHeight),
                   field(kWidth), field(kFps),    field(kCaption)};
    if (!add_plain(f, line)) add_fields(f, name, line, policy);
  }
}

}  // namespace adaptiveload
