#include "adaptiveload/util/format.h"

#include <cstdio>
#include <cstring>

namespace adaptiveload {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  // A value that rounds to zero prints without its sign: never "-0.0%" (-1e-17 idle, -0.0); -inf
  // keeps it.
  if (buf[0] == '-' && std::strpbrk(buf, "123456789iInN") == nullptr) return buf + 1;
  return buf;
}

std::string fmt_gb(double bytes) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

std::string thousands(int64_t v) {
  std::string s = std::to_string(v), out;
  int n = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (n && n % 3 == 0 && *it != '-') out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
    ++n;
  }
  return out;
}

}  // namespace adaptiveload
