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
  std::vector<FoundFile> files;  // sorted by row_path, unique
  // Every entry that gets no row though it would be probed, each with its reason: missing
  // inputs, unreadable folders and entries, dangling symbolic links, FIFOs, sockets and
  // devices, and links to folders (not followed: no loops).
  std::vector<WalkError> errors;
};

// The scan's own outputs, by the flag that names them: never probed. One that is a file the
// scan would probe (named on the command line, or a media file under a folder) is refused.
struct WalkOutput {
  std::string flag;  // "--out", "--errors"
  std::string path;
};

// Throws ConfigError when an output is one of the files the walk would probe (compared by
// identity: symbolic links, "./x" and hard links included); nothing is written before.
WalkResult find_media_files(const std::vector<std::string>& inputs, const std::string& root,
                            bool all_files, const std::vector<WalkOutput>& outputs);

}  // namespace adaptiveload
