#pragma once
// Whether two paths name the same file: by identity (device and inode) where the file exists,
// through symbolic links, "./x" and "x", hard links and relative or absolute spellings alike;
// where it does not exist yet (an output about to be created), by the path it would be created
// at (symbolic links in it resolved, a dangling one to its target). Used to refuse an output
// that would overwrite an input or another output before anything is written.
#include <string>
#include <vector>

namespace adaptiveload {

// Regular files only: two writes to one device or pipe (/dev/null) lose nothing.
bool same_file(const std::string& a, const std::string& b);
// Both exist and are the same regular file (an input is read, so it exists).
bool same_existing_file(const std::string& a, const std::string& b);

// A file a command reads or writes, with the caller's name for it ("--out", "--manifest").
struct NamedFile {
  std::string what;
  std::string path;
};

// Throws ConfigError when two outputs, or an output and an input, are the same file (same_file),
// naming both and what to do. Outputs with an empty path are not written and not checked.
void check_distinct_outputs(const std::vector<NamedFile>& outputs,
                            const std::vector<NamedFile>& inputs);

}  // namespace adaptiveload
