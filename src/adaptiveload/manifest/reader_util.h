#pragma once
// What the manifest readers share (manifest.cpp: CSV and rows; jsonl.cpp): the column order
// and small text helpers. Internal to src/adaptiveload/manifest.
#include <string_view>

namespace adaptiveload {

// fps and the caption are optional; the caption's column is named "caption" or "text".
enum Column { kPath, kFrames, kHeight, kWidth, kFps, kCaption, kColumns };
inline constexpr const char* kColumnNames[kColumns] = {"path",  "num_frames", "height",
                                                       "width", "fps",        "caption"};
inline constexpr const char* kCaptionAlias = "text";

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

inline bool blank(char c) { return c == ' ' || c == '\t'; }

}  // namespace adaptiveload
