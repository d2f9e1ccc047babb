#include "scan/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace adaptiveload {
namespace {

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(std::FILE* stream, bool enabled)
    : stream_(stream), active_(enabled && stream && isatty(fileno(stream))) {}

std::string ProgressBar::line(const ScanProgress& p, int bar_width) {
  const double frac = p.total > 0 ? std::min(1.0, double(p.done) / double(p.total)) : 1.0;
  const int filled = int(frac * bar_width);
  const double rate = p.elapsed_s > 0 ? double(p.done) / p.elapsed_s : 0;
  const double eta = rate > 0 ? double(p.total - p.done) / rate : -1;
  char buf[160];
  std::snprintf(buf, sizeof buf, "scan [%s%s] %lld/%lld files %3.0f%%  %.1f files/s  ETA %s",
                std::string(size_t(filled), '#').c_str(),
                std::string(size_t(bar_width - filled), '.').c_str(),
                static_cast<long long>(p.done), static_cast<long long>(p.total), 100 * frac, rate,
                clock_text(eta).c_str());
  return buf;
}

void ProgressBar::update(const ScanProgress& p) {
  if (!active_) return;
  // "\033[K" clears what a longer previous line left behind.
  std::fprintf(stream_, "\r%s\033[K", line(p).c_str());
  std::fflush(stream_);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (active_ && drawn_) {
    std::fputc('\n', stream_);
    std::fflush(stream_);
  }
  drawn_ = false;
}

}  // namespace adaptiveload
