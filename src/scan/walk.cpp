#include "scan/walk.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include "adaptiveload/util/error.h"
#include "adaptiveload/util/same_file.h"

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

// What an entry that is neither a folder nor a regular file is, for its error line.
std::string odd_entry_reason(fs::file_type t) {
  switch (t) {
    case fs::file_type::fifo:
      return "not a regular file (a FIFO); copy the data into a file to scan it";
    case fs::file_type::socket:
      return "not a regular file (a socket)";
    case fs::file_type::block:
    case fs::file_type::character:
      return "not a regular file (a device)";
    default:
      return "not a regular file";
  }
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
                            bool all_files, const std::vector<WalkOutput>& outputs) {
  WalkResult out;
  const fs::path root_abs = root.empty() ? fs::path() : absolute_normal(root);
  // The output a walked file is (same_existing_file: by identity), or null.
  auto output_of = [&](const fs::path& p) -> const WalkOutput* {
    for (const WalkOutput& o : outputs)
      if (!o.path.empty() && same_existing_file(o.path, p.string())) return &o;
    return nullptr;
  };
  auto wanted = [&](const fs::path& p, bool named) {
    return named || all_files || has_media_extension(p.string());
  };
  auto keep = [&](const fs::path& p, bool named) {
    if (!wanted(p, named)) return;
    if (const WalkOutput* o = output_of(p)) {
      // The previous run's manifest or errors file under a walked folder (--all-files) is
      // not probed; a clip or image, or a file named to scan, is not overwritten.
      if (named || has_media_extension(p.string()))
        throw ConfigError(o->flag + " " + o->path + " is the same file as " + p.string() +
                          ", which the scan reads: writing it would destroy it; write " + o->flag +
                          " to a file that is not scanned");
      return;
    }
    out.files.push_back({p.string(), row_name(p, root_abs)});
  };
  // An entry that is neither a folder nor a regular file: a line, where it would be probed.
  auto odd = [&](const fs::directory_entry& e) {
    std::error_code le, se;
    const fs::file_status link = e.symlink_status(le);
    const fs::file_status st = e.status(se);
    if (fs::is_symlink(link) && fs::is_directory(st)) {
      out.errors.push_back({e.path().string(),
                            "symbolic link to a folder, not followed (no loops); name the folder "
                            "itself to scan it"});
      return;
    }
    const fs::path target = fs::is_symlink(link) ? fs::read_symlink(e.path(), le) : fs::path();
    if (!wanted(e.path(), false) && !(fs::is_symlink(link) && wanted(target, false))) return;
    if (st.type() == fs::file_type::not_found) {
      out.errors.push_back({e.path().string(), fs::is_symlink(link)
                                                   ? "dangling symbolic link (its target " +
                                                         target.string() + " does not exist)"
                                                   : "vanished during the scan"});
      return;
    }
    if (se) {  // a link loop (ELOOP), a permission denied on the way
      out.errors.push_back({e.path().string(), "cannot read: " + se.message()});
      return;
    }
    out.errors.push_back({e.path().string(), odd_entry_reason(st.type())});
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
        const bool link = it->is_symlink(fe);
        if (it->is_directory(fe) && !link)
          folders.push_back(it->path());  // links to folders are not followed: no loops
        else if (it->is_regular_file(fe))
          keep(it->path(), false);
        else
          odd(*it);
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
