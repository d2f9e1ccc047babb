#include "adaptiveload/util/same_file.h"

#include <sys/stat.h>

#include <filesystem>
#include <system_error>

#include "adaptiveload/util/error.h"

namespace adaptiveload {

namespace fs = std::filesystem;

namespace {

// Where a path that does not exist would be created: its existing leading part resolved
// (weakly_canonical), and a dangling symbolic link followed to its target (at most 40 hops,
// as the kernel's ELOOP limit).
fs::path creation_path(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) p = path;
  for (int hop = 0; hop < 40 && fs::is_symlink(fs::symlink_status(p, ec)); ++hop) {
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  const fs::path w = fs::weakly_canonical(p, ec);
  return (ec ? p : w).lexically_normal();
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  const bool ea = ::stat(a.c_str(), &sa) == 0, eb = ::stat(b.c_str(), &sb) == 0;
  // Two writes to one device or pipe (/dev/null) lose nothing: only regular files count.
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && S_ISREG(sa.st_mode);
  if (ea != eb) return false;  // one exists, the other would be created: two files
  return creation_path(a) == creation_path(b);
}

bool same_existing_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino && S_ISREG(sa.st_mode);
}

void check_distinct_outputs(const std::vector<NamedFile>& outputs,
                            const std::vector<NamedFile>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedFile& o = outputs[i];
    if (o.path.empty()) continue;
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && same_file(outputs[j].path, o.path))
        throw ConfigError(o.what + " " + o.path + " is the same file as " + outputs[j].what + " " +
                          outputs[j].path +
                          ": one would overwrite the other; give them different files");
    for (const NamedFile& in : inputs)
      if (!in.path.empty() && same_existing_file(in.path, o.path))
        throw ConfigError(o.what + " " + o.path + " is the same file as the input " + in.what +
                          " " + in.path +
                          ": writing it would destroy what is read; write to another file");
  }
}

}  // namespace adaptiveload
