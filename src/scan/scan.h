#pragma once
// `adaptiveload scan`: folders of clips and images -> the canonical manifest
// (path,num_frames,height,width,fps; fps empty for images) plus an errors file (path,reason).
// Files are probed in parallel on `jobs` threads; rows are written in sorted path order as
// soon as every earlier file is done, each row whole and flushed, so the manifest on disk is
// always a sorted prefix of complete rows and an interrupted scan resumes with `append`.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace adaptiveload {

struct ScanProgress {
  int64_t done = 0;   // files probed so far (any order)
  int64_t total = 0;  // files to probe
  double elapsed_s = 0;
};

struct ScanOptions {
  std::vector<std::string> inputs;  // folders (walked recursively) or files
  std::string out;                  // manifest CSV
  std::string errors;               // errors CSV; "" = out + ".errors.csv"
  std::string root;                 // write paths relative to this folder; "" = as found
  int jobs = 0;                     // probing threads; 0 = hardware threads
  bool count_frames = false;        // count packets instead of trusting the header
  bool append = false;              // keep `out`'s rows and probe only files not in it
  bool all_files = false;           // probe every file, not only media extensions
  // Called on the calling thread about every 100 ms while probing, and once at the end.
  std::function<void(const ScanProgress&)> on_progress;
};

struct ScanSummary {
  int64_t found = 0;    // files found by the walk
  int64_t skipped = 0;  // already in the manifest (append)
  int64_t probed = 0;
  int64_t rows = 0;    // rows written by this run
  int64_t errors = 0;  // lines written to the errors file (files and folders)
  double seconds = 0;  // walk + probe + write
  double files_per_s() const { return seconds > 0 ? double(probed) / seconds : 0; }
  std::string errors_path;
};

// Runs a scan. Bad media files never stop it (they become error lines); throws InputError
// when the output cannot be written or an existing manifest cannot be appended to.
ScanSummary scan_to_manifest(const ScanOptions& options);

// One CSV field, quoted when it holds a comma, quote or line break (RFC 4180).
std::string csv_field(const std::string& s);

}  // namespace adaptiveload
