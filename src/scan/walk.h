#pragma once
// Finds the files a scan probes: walks folders recursively (files named on the command line
// are taken as they are), keeps media extensions unless all_files, and names each file as
// its manifest row will: relative to `root` when given, else the input as given joined with
// the file's path under it. Sorted by that name, duplicates removed, so the output order
// never depends on the file system's listing order.
#include <string>
#include <vector>

namespace adaptiveload {

// Extensions considered (case-insensitive) without --all-files.
extern const char* const kVideoExtensions[];  // mp4 mov mkv webm avi m4v
extern const char* const kImageExtensions[];  // jpg jpeg png webp bmp
bool has_media_extension(const std::string& path);

struct FoundFile {
  std::string disk_path;  // to open
  std::string row_path;   // as written in the manifest
};

struct WalkError {
  std::string path;
  std::string reason;
};

struct WalkResult {
  std::vector<FoundFile> files;   // sorted by row_path, unique
  std::vector<WalkError> errors;  // unreadable folders, missing inputs
};

// `exclude`: files never to probe (the scan's own output and errors files).
WalkResult find_media_files(const std::vector<std::string>& inputs, const std::string& root,
                            bool all_files, const std::vector<std::string>& exclude);

}  // namespace adaptiveload
