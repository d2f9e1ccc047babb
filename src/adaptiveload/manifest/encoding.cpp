// A manifest that is not UTF-8 (UTF-16 or UTF-32, with or without a byte-order mark, or
// Latin-1 bytes in its header) is refused naming its encoding and the command that converts
// it, not read as garbage ("header has no 'path' column"). Paths in rows are bytes, as file
// names are on Linux: only the header line must be UTF-8.
#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>

#include "adaptiveload/manifest/reader_util.h"

namespace adaptiveload {

namespace {

// The Unicode encoding of a text that starts with a byte-order mark, or whose first
// characters (ASCII in any manifest header) show NUL bytes in the UTF-16 or UTF-32 pattern.
const char* wide_encoding(std::string_view t) {
  auto at = [&](size_t i) { return i < t.size() ? static_cast<unsigned char>(t[i]) : 0x100u; };
  if (at(0) == 0xFF && at(1) == 0xFE && at(2) == 0 && at(3) == 0)
    return "UTF-32 LE (byte-order mark FF FE 00 00)";
  if (at(0) == 0 && at(1) == 0 && at(2) == 0xFE && at(3) == 0xFF)
    return "UTF-32 BE (byte-order mark 00 00 FE FF)";
  if (at(0) == 0xFF && at(1) == 0xFE) return "UTF-16 LE (byte-order mark FF FE)";
  if (at(0) == 0xFE && at(1) == 0xFF) return "UTF-16 BE (byte-order mark FE FF)";
  if (t.size() < 4) return nullptr;
  const bool z0 = at(0) == 0, z1 = at(1) == 0, z2 = at(2) == 0, z3 = at(3) == 0;
  if (!z0 && z1 && z2 && z3) return "UTF-32 LE (no byte-order mark)";
  if (z0 && z1 && z2 && !z3) return "UTF-32 BE (no byte-order mark)";
  if (!z0 && z1 && !z2 && z3) return "UTF-16 LE (no byte-order mark)";
  if (z0 && !z1 && z2 && !z3) return "UTF-16 BE (no byte-order mark)";
  return nullptr;
}

// Length of the valid UTF-8 sequence at s[i], 0 when it is not one.
size_t utf8_length(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  const size_t n = c >= 0xC2 && c <= 0xDF   ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
  if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) ||
      (c == 0xF4 && c1 >= 0x90))
    return 0;  // overlong forms, surrogates, past U+10FFFF
  return n;
}

}  // namespace

std::string encoding_problem(std::string_view text, const std::string& name) {
  const size_t dot = name.find_last_of('.');
  const std::string converted = dot == std::string::npos || name.find('/', dot) != std::string::npos
                                    ? name + ".utf8"
                                    : name.substr(0, dot) + ".utf8" + name.substr(dot);
  const std::string to = " -t UTF-8 '" + name + "' > '" + converted + "' and use that file";
  const std::string convert = "; convert it to UTF-8 first: iconv -f ";
  if (const char* wide = wide_encoding(text)) {
    const std::string from = std::string(wide).substr(0, 6);  // UTF-16 or UTF-32
    return std::string("is ") + wide + ", not UTF-8" + convert + from + to;
  }
  size_t i = text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;  // a UTF-8 byte-order mark is fine
  const size_t end = std::min(text.find_first_of("\r\n", i), text.size());
  for (size_t column = 1; i < end; ++column) {
    if (text[i] == 0)
      return "has a NUL byte in its first line (column " + std::to_string(column) +
             "): it is not UTF-8 text" + convert + "<its encoding>" + to;
    const size_t n = utf8_length(text, i);
    if (n == 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[i]));
      return std::string("is not UTF-8: its first line has the byte ") + byte + " (column " +
             std::to_string(column) +
             "), which is not valid UTF-8 (Latin-1 or Windows-1252 text?)" + convert + "LATIN1" +
             to + " (or -f CP1252 for Windows text)";
    }
    i += n;
  }
  return "";
}

}  // namespace adaptiveload
