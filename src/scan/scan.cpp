#include "scan/scan.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/same_file.h"
#include "scan/probe.h"
#include "scan/walk.h"

namespace adaptiveload {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestHeader = "path,num_frames,height,width,fps\n";
constexpr const char* kErrorsHeader = "path,reason\n";

// An output file written one whole, flushed row at a time: a crash or Ctrl-C leaves only
// complete rows behind.
class RowWriter {
 public:
  RowWriter(std::string path, const char* mode) : path_(std::move(path)) {
    f_ = std::fopen(path_.c_str(), mode);
    if (!f_)
      throw InputError(path_, "cannot open for writing; check the folder exists and is writable");
  }
  ~RowWriter() {
    if (f_) std::fclose(f_);
  }
  RowWriter(const RowWriter&) = delete;
  RowWriter& operator=(const RowWriter&) = delete;
  void write(const std::string& line) {
    if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
      throw InputError(
          path_,
          "write failed (disk full?); the rows written so far are complete, rerun with --append");
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path, "cannot read the existing manifest to append to it");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Paths already in an existing manifest (for --append). A last line without its newline is
// the trace of an interrupted write: it is cut off so the file again ends with a whole row.
std::unordered_set<std::string> existing_paths(const std::string& path, bool& write_header) {
  std::unordered_set<std::string> paths;  // membership only; never iterated into the output
  std::string text = read_all(path);
  if (!text.empty() && text.back() != '\n') {
    const size_t keep =
        text.find_last_of('\n') == std::string::npos ? 0 : text.find_last_of('\n') + 1;
    text.resize(keep);
    fs::resize_file(path, keep);
  }
  write_header = text.empty();
  if (text.empty()) return paths;
  size_t pos = 0;
  int64_t lines = 0;
  std::vector<std::string> fields;
  next_csv_record(text, pos, fields, lines, path);
  const auto col = std::find(fields.begin(), fields.end(), "path");
  if (col == fields.end())
    throw InputError(path + ":1",
                     "exists but is not a manifest (no 'path' column in its header); remove it or "
                     "choose another --out");
  const size_t c = size_t(col - fields.begin());
  while (next_csv_record(text, pos, fields, lines, path))
    if (c < fields.size()) paths.insert(fields[c]);
  return paths;
}

std::string fps_text(double fps) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", fps);  // 30000/1001 -> 29.97
  return buf;
}

std::string manifest_row(const std::string& path, const MediaInfo& m) {
  return csv_field(path) + "," + std::to_string(m.num_frames) + "," + std::to_string(m.height) +
         "," + std::to_string(m.width) + "," + (m.image ? std::string() : fps_text(m.fps)) + "\n";
}

std::string error_row(const std::string& path, const std::string& reason) {
  return csv_field(path) + "," + csv_field(reason) + "\n";
}

}  // namespace

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

ScanSummary scan_to_manifest(const ScanOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  ScanSummary sum;
  sum.errors_path = o.errors.empty() ? o.out + ".errors.csv" : o.errors;
  if (o.out.empty()) throw ConfigError("scan: no output manifest given (--out FILE)");

  // Outputs that are one file (--out and --errors, or a file named to scan) are refused
  // before anything is written; so is an output that the walk would probe.
  std::vector<NamedFile> named_inputs;
  for (const auto& in : o.inputs) named_inputs.push_back({"scanned file", in});
  check_distinct_outputs({{"--out", o.out}, {"--errors", sum.errors_path}}, named_inputs);
  WalkResult walk = find_media_files(o.inputs, o.root, o.all_files,
                                     {{"--out", o.out}, {"--errors", sum.errors_path}});

  // Open the outputs before probing: a path that cannot be written fails before any probing.
  std::unordered_set<std::string> done;
  bool write_header = true;
  std::error_code ec;
  if (o.append && fs::exists(o.out, ec)) done = existing_paths(o.out, write_header);
  RowWriter out(o.out, o.append ? "ab" : "wb");
  if (write_header) out.write(kManifestHeader);
  // Rewritten every run: files with errors are not in the manifest, so a resumed scan
  // probes them again and records them again if they are still bad.
  RowWriter errors(sum.errors_path, "wb");
  errors.write(kErrorsHeader);

  sum.found = int64_t(walk.files.size());
  for (const auto& e : walk.errors) errors.write(error_row(e.path, e.reason));
  sum.errors += int64_t(walk.errors.size());

  std::vector<FoundFile> todo;
  todo.reserve(walk.files.size());
  for (auto& f : walk.files) {
    if (done.count(f.row_path))
      ++sum.skipped;
    else
      todo.push_back(std::move(f));
  }
  const size_t n = todo.size();
  unsigned jobs = o.jobs > 0 ? unsigned(o.jobs) : std::max(1u, std::thread::hardware_concurrency());
  jobs = unsigned(std::min<size_t>(jobs, std::max<size_t>(n, 1)));

  // Workers probe in any order; this thread writes results strictly in sorted order.
  std::vector<ProbeResult> results(n);
  std::vector<char> ready(n, 0);
  std::mutex m;
  std::condition_variable cv;
  std::atomic<size_t> next{0};
  std::atomic<int64_t> probed{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  for (unsigned j = 0; j < jobs; ++j)
    pool.emplace_back([&] {
      for (size_t i; !stop && (i = next.fetch_add(1)) < n;) {
        ProbeResult r;
        try {
          r = probe_media(todo[i].disk_path, o.count_frames);
        } catch (const std::exception& e) {
          r.ok = false;
          r.error = std::string("probe failed: ") + e.what();
        }
        std::lock_guard<std::mutex> lk(m);
        results[i] = std::move(r);
        ready[i] = 1;
        ++probed;
        cv.notify_one();
      }
    });
  auto join = [&] {
    stop = true;
    for (auto& t : pool)
      if (t.joinable()) t.join();
  };
  auto report = [&] {
    if (o.on_progress) o.on_progress({probed.load(), int64_t(n), elapsed()});
  };
  try {
    auto last_report = Clock::now();
    for (size_t i = 0; i < n; ++i) {
      ProbeResult r;
      {
        std::unique_lock<std::mutex> lk(m);
        while (!ready[i]) {
          cv.wait_for(lk, std::chrono::milliseconds(100));
          if (Clock::now() - last_report >= std::chrono::milliseconds(100)) {
            lk.unlock();
            report();
            last_report = Clock::now();
            lk.lock();
          }
        }
        r = std::move(results[i]);
      }
      if (r.ok) {
        out.write(manifest_row(todo[i].row_path, r.info));
        ++sum.rows;
      } else {
        errors.write(error_row(todo[i].row_path, r.error));
        ++sum.errors;
      }
      if (Clock::now() - last_report >= std::chrono::milliseconds(100)) {
        report();
        last_report = Clock::now();
      }
    }
  } catch (...) {
    join();
    throw;
  }
  join();
  sum.probed = probed.load();
  sum.seconds = elapsed();
  report();
  return sum;
}

}  // namespace adaptiveload
