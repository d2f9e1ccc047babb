#pragma once
// A manifest's bytes in memory (manifest.cpp's loaders): a file mapped or read whole into one
// buffer, large buffers on huge pages, and a fast newline count for sizing the row arrays.
// Internal to src/adaptiveload/manifest.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "adaptiveload/manifest/manifest.h"

namespace adaptiveload {

// An uninitialised buffer of n bytes (large ones from their own mapping, huge pages asked for).
std::shared_ptr<char> big_buffer(size_t n);
// LF bytes in `s`.
size_t count_newlines(std::string_view s);
// A regular, non-empty file mapped read-only; nothing for anything else or if mapping fails.
std::optional<Manifest::Text> map_file(const std::string& path);
// A whole file read into one buffer (a pipe or a growing file too). Throws InputError naming
// the path when it cannot be opened or read.
Manifest::Text read_whole_file(const std::string& path);

}  // namespace adaptiveload
