#pragma once
// Small text formatting helpers shared by the CLI tables and the HTML report.
#include <cstdint>
#include <string>

namespace adaptiveload {

// printf-style formatting of one number: fmt("%.1f%%", 12.34) -> "12.3%".
std::string fmt(const char* format, double v);
// 12.34e9 bytes -> "12.3 GB".
std::string fmt_gb(double bytes);
// 1234567 -> "1,234,567".
std::string thousands(int64_t v);

}  // namespace adaptiveload
