#include "scan/walk.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

namespace adaptiveload {

namespace fs = std::filesystem;

const char* const kVideoExtensions[] = {"mp4", "mov", "mkv", "webm", "avi", "m4v", nullptr};
const char* const kImageExtensions[] = {"jpg", "jpeg", "png", "webp", "bmp", nullptr};

namespace {

std::string lower_extension(const fs::path& p) {
  std::string e = p.extension().string();
  if (!e.empty() && e[0] == '.') e.erase(0, 1);
  for (char& c : e) c = char(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

// Absolute and lexically normal, without touching the disk (symlinks are kept as named).
fs::path absolute_normal(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  return (ec ? p : a).lexically_normal();
}

std::string row_name(const fs::path& file, const fs::path& root_abs) {
  if (root_abs.empty()) return file.lexically_normal().generic_string();
  return absolute_normal(file).lexically_relative(root_abs).generic_string();
}

}  // namespace

bool has_media_extension(const std::string& path) {
  const std::string e = lower_extension(fs::path(path));
  for (const char* const* list : {kVideoExtensions, kImageExtensions})
    for (const char* const* x = list; *x; ++x)
      if (e == *x) return true;
  return false;
}

WalkResult find_media_files(const std::vector<std::string>& inputs, const std::string& root,
                            bool all_files, const std::vector<std::string>& exclude) {
  WalkResult out;
  const fs::path root_abs = root.empty() ? fs::path() : absolute_normal(root);
  std::vector<fs::path> excluded;
  for (const auto& e : exclude) excluded.push_back(absolute_normal(e));
  auto keep = [&](const fs::path& p, bool named) {
    if (!named && !all_files && !has_media_extension(p.string())) return;
    const fs::path a = absolute_normal(p);
    if (std::find(excluded.begin(), excluded.end(), a) != excluded.end()) return;
    out.files.push_back({p.string(), row_name(p, root_abs)});
  };

  for (const auto& input : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(input, ec);
    if (ec || !fs::exists(st)) {
      out.errors.push_back({input, "does not exist or cannot be accessed: " + ec.message()});
      continue;
    }
    if (!fs::is_directory(
            st)) {  // a file named on the command line is probed whatever its extension
      keep(fs::path(input), true);
      continue;
    }
    // Own recursion, not recursive_directory_iterator: that one ends the whole walk at the
    // first folder it cannot open; here such a folder is noted and the walk goes on.
    std::vector<fs::path> folders{fs::path(input)};
    while (!folders.empty()) {
      const fs::path dir = folders.back();
      folders.pop_back();
      fs::directory_iterator it(dir, ec), end;
      if (ec) {
        out.errors.push_back({dir.string(), "cannot list folder: " + ec.message()});
        continue;
      }
      for (; it != end; it.increment(ec)) {
        std::error_code fe;
        if (it->is_directory(fe)) {
          if (!it->is_symlink(fe))
            folders.push_back(it->path());  // no loops through linked folders
        } else if (it->is_regular_file(fe)) {
          keep(it->path(), false);
        }
      }
      if (ec) out.errors.push_back({dir.string(), "listing stopped: " + ec.message()});
    }
  }
  std::sort(out.files.begin(), out.files.end(),
            [](const FoundFile& a, const FoundFile& b) { return a.row_path < b.row_path; });
  out.files.erase(
      std::unique(out.files.begin(), out.files.end(),
                  [](const FoundFile& a, const FoundFile& b) { return a.row_path == b.row_path; }),
      out.files.end());
  std::sort(out.errors.begin(), out.errors.end(),
            [](const WalkError& a, const WalkError& b) { return a.path < b.path; });
  return out;
}

}  // namespace adaptiveload
