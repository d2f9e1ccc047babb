// The JSONL reader of Manifest: a fast path for flat objects of plain strings and numbers,
// and nlohmann::json for every other line (its messages name the line and the problem).
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/manifest/reader_util.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {
namespace {

// Fast path of one JSONL line: a flat object whose values are strings without escapes
// (printable ASCII), numbers or null, no key twice. Fills the five columns (views into `s`;
// null and absent keys are empty) and returns true; false sends the line to the full parser,
// which gives the same values for such lines and the messages for every other one.
// fast_json_object: the same for the object at the start of [p, e), which may go on past it:
// returns the end of the object and the blanks after it, or nullptr. It never reads past a
// CR or LF outside a string nor accepts one inside, so what it accepts ends on its line.
const char* fast_json_object(const char* p, const char* const e, std::string_view (&out)[kColumns]);

bool fast_json_fields(std::string_view s, std::string_view (&out)[kColumns]) {
  return fast_json_object(s.data(), s.data() + s.size(), out) == s.data() + s.size();
}

// long-function: the JSONL fast path parsing one object (keys compared in place, strings scanned
// 16 bytes at a time, numbers) in one loop: a hot loop, no calls per field
const char* fast_json_object(const char* p, const char* const e,
                             std::string_view (&out)[kColumns]) {
  auto ws = [&] {
    while (p < e && (*p == ' ' || *p == '\t')) ++p;
  };
  auto digit = [&] { return p < e && unsigned(*p) - '0' <= 9; };
  auto string = [&](std::string_view& v) {
    const char* b = ++p;
#if defined(__SSE2__)
    // 16 bytes at a time to the first '"', '\\', control byte or non-ASCII byte (signed < 0x20).
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'),
                  space = _mm_set1_epi8(0x20);
    while (e - p >= 16) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i hit =
          _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                       _mm_cmplt_epi8(x, space));
      const int m = _mm_movemask_epi8(hit);
      if (m != 0) {
        p += __builtin_ctz(unsigned(m));
        break;
      }
      p += 16;
    }
#endif
    while (p < e && *p != '"') {
      const unsigned char c = static_cast<unsigned char>(*p);
      if (c < 0x20 || c >= 0x80 || c == '\\') return false;
      ++p;
    }
    if (p == e) return false;
    v = std::string_view(b, size_t(p - b));
    ++p;
    return true;
  };
  for (auto& v : out) v = {};
  if (p == e || *p != '{') return nullptr;
  ++p;
  ws();
  unsigned seen = 0;
  const char*
      other_key[16];  // other keys, to refuse a duplicate (uninitialised: only n_others used)
  size_t other_len[16];
  size_t n_others = 0;
  static constexpr std::string_view kKeys[kColumns] = {"path",  "num_frames", "height",
                                                       "width", "fps",        "caption"};
  while (true) {
    std::string_view key, val;
    if (p == e || *p != '"') return nullptr;
    // A column's key, compared in place with its closing quote (most keys are one of these).
    int k = -1;
    {
      const size_t left = size_t(e - p) - 1;  // bytes after the opening quote
      const char* q = p + 1;
      // `quoted` is a column's key with its closing quote: a fixed-size compare (inlined).
      auto try_key = [&](int column, const auto& quoted) {
        constexpr size_t len = sizeof(quoted) - 2;  // without the quote and the terminating 0
        if (left <= len || memcmp(q, quoted, len + 1) != 0) return;
        k = column;
        key = std::string_view(q, len);
        p = q + len + 1;
      };
      switch (left == 0 ? '\0' : *q) {
        case 'p':
          try_key(kPath, "path\"");
          break;
        case 'n':
          try_key(kFrames, "num_frames\"");
          break;
        case 'h':
          try_key(kHeight, "height\"");
          break;
        case 'w':
          try_key(kWidth, "width\"");
          break;
        case 'f':
          try_key(kFps, "fps\"");
          break;
        case 'c':
          try_key(kCaption, "caption\"");
          break;
        case 't':
          try_key(kCaption, "text\"");
          break;
        default:
          break;
      }
    }
    if (k < 0 && !string(key)) return nullptr;
    ws();
    if (p == e || *p != ':') return nullptr;
    ++p;
    ws();
    if (p == e) return nullptr;
    bool is_string = false;
    if (*p == '"') {
      if (!string(val)) return nullptr;
      is_string = true;
    } else if (*p == 'n') {
      if (e - p < 4 || memcmp(p, "null", 4) != 0) return nullptr;
      p += 4;
    } else {
      // JSON number grammar: -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?
      const char* b = p;
      if (*p == '-') ++p;
      if (p < e && *p == '0') {
        ++p;
      } else if (digit()) {
        while (digit()) ++p;
      } else {
        return nullptr;
      }
      if (p < e && *p == '.') {
        ++p;
        if (!digit()) return nullptr;
        while (digit()) ++p;
      }
      if (p < e && (*p == 'e' || *p == 'E')) {
        ++p;
        if (p < e && (*p == '+' || *p == '-')) ++p;
        if (!digit()) return nullptr;
        while (digit()) ++p;
      }
      if (p - b > 18) return nullptr;  // a long integer parses as a double there
      val = std::string_view(b, size_t(p - b));
    }
    ws();
    for (int c = 0; c < kColumns && k < 0; ++c)
      if (key == kKeys[c]) k = c;
    if (k < 0 && key == kCaptionAlias) k = kCaption;
    if (k >= 0) {
      if (seen & (1u << k)) return nullptr;  // a key twice, or both caption and text
      seen |= 1u << k;
      // A number as path or caption: the full parser says why it is refused.
      if ((k == kPath || k == kCaption) && !is_string && !val.empty()) return nullptr;
      out[k] = val;
    } else {
      for (size_t i = 0; i < n_others; ++i)
        if (std::string_view(other_key[i], other_len[i]) == key) return nullptr;
      if (n_others == 16) return nullptr;
      other_key[n_others] = key.data(), other_len[n_others] = key.size(), ++n_others;
    }
    if (p == e) return nullptr;
    if (*p == ',') {
      ++p;
      ws();
      continue;
    }
    if (*p != '}') return nullptr;
    ++p;
    ws();
    return p;
  }
}

// The key whose value in the line `s` is the number text `number` ("(row)" when not found):
// the quoted string before the ':' that precedes it.
std::string key_before(std::string_view s, const std::string& number) {
  for (size_t at = s.find(number); at != std::string_view::npos; at = s.find(number, at + 1)) {
    size_t i = at;
    while (i > 0 && blank(s[i - 1])) --i;
    if (i == 0 || s[i - 1] != ':') continue;
    --i;
    while (i > 0 && blank(s[i - 1])) --i;
    if (i < 2 || s[i - 1] != '"') continue;
    const size_t open = s.rfind('"', i - 2);
    if (open != std::string_view::npos) return std::string(s.substr(open + 1, i - 2 - open));
  }
  return "(row)";
}

}  // namespace

void Manifest::load_jsonl(std::string_view text, const std::string& name, BadRowPolicy policy) {
  size_t pos = 0;
  int64_t line = 0;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") pos = 3;  // UTF-8 byte-order mark
  const char* const t = text.data();
  const size_t n = text.size();
  std::string_view cols[kColumns];
  // Line `s` (its columns in `cols` when `parsed`): valid rows the fast way, the rest (and
  // the messages of bad ones) through nlohmann.
  auto add_line = [&](std::string_view s, int64_t line, bool parsed) {
    if (parsed) {
      const Fields f{cols[kPath],  cols[kFrames], cols[kHeight],
                     cols[kWidth], cols[kFps],    cols[kCaption]};
      if (add_plain(f, line)) return;
      ClipInfo c;
      std::string field, reason;
      if (parse_fields(f, c, field, reason)) return push(f.path, c, true, line, f.caption);
    }
    load_jsonl_line(s, name, line, policy);
  };
  while (pos < n) {
    // Lines end in LF, CRLF or a lone CR (a JSON string cannot hold a raw CR or LF).
    {
      // The common line first: blanks, one flat object, blanks, then LF, CRLF or the end of
      // the text (a lone CR ends a line, and the fast parser stops at any CR outside a string).
      size_t b = pos;
      while (b < n && blank(t[b])) ++b;
      const char* q = b < n && t[b] == '{' ? fast_json_object(t + b, t + n, cols) : nullptr;
      size_t end = q ? size_t(q - t) : 0;
      const bool whole = q && (end == n || t[end] == '\n' ||
                               (t[end] == '\r' && end + 1 < n && t[end + 1] == '\n'));
      if (whole) {
        size_t e = end;
        while (e > b && blank(t[e - 1])) --e;
        const std::string_view s(t + b, e - b);
        pos = end + (end < n && t[end] == '\r' ? 2 : 1);
        add_line(s, ++line, true);
        continue;
      }
    }
    const void* lf = memchr(t + pos, '\n', n - pos);
    size_t end = lf ? size_t(static_cast<const char*>(lf) - t) : n;
    if (const void* cr = memchr(t + pos, '\r', end - pos))
      end = size_t(static_cast<const char*>(cr) - t);
    std::string_view s = trim(text.substr(pos, end - pos));
    pos = end + (end + 1 < n && t[end] == '\r' && t[end + 1] == '\n' ? 2 : 1);
    ++line;
    if (s.empty()) continue;
    add_line(s, line, fast_json_fields(s, cols));
  }
}

// One line through nlohmann::json: every kind of value, escapes, and the messages of bad rows.
void Manifest::load_jsonl_line(std::string_view s, const std::string& name, int64_t line,
                               BadRowPolicy policy) {
  using json = nlohmann::json;
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
  } catch (
      const json::out_of_range& e) {  // a number past a double (1e400): out of range, in its field
    const std::string what = e.what();
    const size_t q = what.find('\''), q2 = what.rfind('\'');
    const std::string number =
        q != std::string::npos && q2 > q ? what.substr(q + 1, q2 - q - 1) : "";
    field = number.empty() ? "(row)" : key_before(s, number);
    reason = number.empty() ? "a number is out of range (" + what + ")"
                            : "'" + number + "' is out of range";
  } catch (const json::exception& e) {  // parse_error
    field = "(row)";
    reason = std::string("not valid JSON (") + e.what() + ")";
  }
  // Numbers and strings holding numbers are both accepted; any other type is a bad row.
  // is_path: a string only (path, caption); else numbers and strings holding numbers.
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
  const std::string path = text_of("path", true), frames = text_of("num_frames", false),
                    height = text_of("height", false), width = text_of("width", false),
                    fps = text_of("fps", false);
  if (reason.empty() && j.contains(kColumnNames[kCaption]) && j.contains(kCaptionAlias))
    field = "caption", reason = "has both 'caption' and 'text', two names of the caption; keep one";
  const std::string caption =
      text_of(j.contains(kCaptionAlias) ? kCaptionAlias : kColumnNames[kCaption], true);
  if (!reason.empty()) {
    if (policy == BadRowPolicy::kError)
      throw InputError(name + ":" + std::to_string(line),
                       (field == "(row)" ? "" : "field '" + field + "': ") + reason +
                           " (fix the row, or pass " +
                           option_word("on_bad_row", "skip", Spelling::kEquals) + ")");
    bad_rows_.push_back({name, line, field, reason});
    push("", ClipInfo{}, false, line);
    return;
  }
  add_fields({path, frames, height, width, fps, caption}, name, line, policy);
}

}  // namespace adaptiveload
