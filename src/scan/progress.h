#pragma once
// A one-line progress bar on a terminal: files done / total, percent, rate and ETA,
// redrawn in place with '\r'. Disabled (prints nothing) when the stream is not a TTY.
#include <cstdio>
#include <string>

#include "scan/scan.h"

namespace adaptiveload {

class ProgressBar {
 public:
  // enabled: the caller's choice (e.g. not --quiet); the bar also needs `stream` to be a TTY.
  ProgressBar(std::FILE* stream, bool enabled);
  void update(const ScanProgress& p);
  // Ends the line so later output starts on a fresh one (only if something was drawn).
  void finish();
  bool active() const { return active_; }

  // The text of one update, without '\r' (tests and non-terminal callers).
  static std::string line(const ScanProgress& p, int bar_width = 30);

 private:
  std::FILE* stream_;
  bool active_;
  bool drawn_ = false;
};

}  // namespace adaptiveload
