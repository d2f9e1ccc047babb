#pragma once
// What the manifest readers share (manifest.cpp: CSV and rows; jsonl.cpp): the column order
// and small text helpers. Internal to src/adaptiveload/manifest.
#include <string>
#include <string_view>

namespace adaptiveload {

// fps and the caption are optional; the caption's column is named "caption" or "text".
enum Column { kPath, kFrames, kHeight, kWidth, kFps, kCaption, kColumns };
inline constexpr const char* kColumnNames[kColumns] = {"path",  "num_frames", "height",
                                                       "width", "fps",        "caption"};
inline constexpr const char* kCaptionAlias = "text";

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// "" for UTF-8 text (a UTF-8 byte-order mark allowed), else why not, naming the encoding
// (UTF-16 or UTF-32 by their byte-order mark or NUL pattern, a byte that is not UTF-8 in the
// header) and the iconv command that converts file `name` (encoding.cpp).
std::string encoding_problem(std::string_view text, const std::string& name);

inline bool blank(char c) { return c == ' ' || c == '\t'; }

}  // namespace adaptiveload
