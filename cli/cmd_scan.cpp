// adaptiveload scan DIR... --out manifest.csv: probe every clip and image under the folders
// with FFmpeg's libraries and write the canonical manifest, bad files to an errors file.
// Built only with the media scanner (AL_HAVE_SCAN, cmake/scan.cmake); without it the
// subcommand exists and exits 2 saying how to enable it.
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "adaptiveload/util/format.h"
#include "commands.h"
#include "output_files.h"

#ifdef AL_HAVE_SCAN
#include "scan/progress.h"
#include "scan/scan.h"
#endif

namespace adaptiveload::cli {
namespace {

constexpr const char* kAbout =
    "Write a manifest (path,num_frames,height,width,fps) for every video and image under the "
    "folders, read "
    "from container headers with FFmpeg (rotation applied); unreadable files go to an errors file";

#ifdef AL_HAVE_SCAN

struct ScanCommand : Command {
  ScanOptions opts;
  bool quiet = false;
};

int run_scan(ScanCommand& c) {
  // The library refuses --out, --errors and scanned files that are one file; here also
  // standard output redirected to one of them.
  std::vector<NamedFile> named;
  for (const auto& in : c.opts.inputs) named.push_back({"scanned file", in});
  check_outputs({{"--out", c.opts.out},
                 {"--errors", c.opts.errors.empty() ? c.opts.out + ".errors.csv" : c.opts.errors}},
                named);
  ProgressBar bar(stderr, !c.quiet);
  c.opts.on_progress = [&bar](const ScanProgress& p) { bar.update(p); };
  ScanSummary s;
  try {
    s = scan_to_manifest(c.opts);
  } catch (...) {
    bar.finish();
    throw;
  }
  bar.finish();
  if (!c.quiet) {
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.1f", s.files_per_s());
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.2f", s.seconds);
    std::cout << "scan: " << thousands(s.found) << " files found";
    if (c.opts.append) std::cout << ", " << thousands(s.skipped) << " already in " << c.opts.out;
    std::cout << "; " << thousands(s.rows) << " rows written to " << c.opts.out << ", "
              << thousands(s.errors) << " errors"
              << (s.errors ? " (see " + s.errors_path + ")" : std::string()) << "; "
              << thousands(s.probed) << " files probed in " << secs << " s, " << rate
              << " files/s\n";
  }
  return 0;
}

#endif

}  // namespace

#ifdef AL_HAVE_SCAN

std::shared_ptr<Command> add_scan_command(CLI::App& app) {
  auto c = std::make_shared<ScanCommand>();
  c->app = app.add_subcommand("scan", kAbout);
  c->app->footer(
      "Files considered: video mp4 mov mkv webm avi m4v, image jpg jpeg png webp bmp (any case); "
      "--all-files probes "
      "every file. Rows are in sorted path order, each written whole; an interrupted scan "
      "continues with --append. "
      "Frames: the stream header's nb_frames, else duration x fps, else (or with --count-frames) "
      "counted packets.");
  c->app->add_option("dirs", c->opts.inputs, "Folders to walk (recursively) or single files")
      ->required()
      ->check(CLI::ExistingPath);
  c->app->add_option("--out,-o", c->opts.out, "Manifest CSV to write")->required();
  c->app->add_option("--errors", c->opts.errors,
                     "Errors CSV (path,reason) [default: <out>.errors.csv]");
  c->app->add_option("--root", c->opts.root,
                     "Write paths relative to this folder [default: the folder as given joined "
                     "with the path under "
                     "it]");
  c->opts.jobs = int(std::max(1u, std::thread::hardware_concurrency()));
  c->app->add_option("--jobs,-j", c->opts.jobs, "Files probed in parallel")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  c->app->add_flag(
      "--count-frames", c->opts.count_frames,
      "Count video packets exactly (reads whole files) instead of trusting the header");
  c->app->add_flag(
      "--append", c->opts.append,
      "Keep the rows already in --out and probe only files not in it (resume an interrupted scan)");
  c->app->add_flag("--all-files", c->opts.all_files, "Probe every file, not only media extensions");
  c->app->add_flag("--quiet,-q", c->quiet, "No progress bar and no summary");
  ScanCommand* p = c.get();
  c->run = [p] { return run_scan(*p); };
  return c;
}

#else

std::shared_ptr<Command> add_scan_command(CLI::App& app) {
  auto c = std::make_shared<Command>();
  c->app = app.add_subcommand("scan", std::string(kAbout) + " [not built: needs FFmpeg]");
  c->app->allow_extras();
  c->app->prefix_command();
  c->run = [] {
    std::cerr
        << "adaptiveload scan: error: this build has no media scanner (configured with AL_SCAN=OFF "
           "or "
           "without FFmpeg's development libraries); install libavformat-dev libavcodec-dev "
           "libavutil-dev and "
           "pkg-config (scripts/install_deps.sh), then reconfigure with -DAL_SCAN=ON and rebuild\n";
    return 2;
  };
  return c;
}

#endif

}  // namespace adaptiveload::cli
