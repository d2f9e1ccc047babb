#pragma once
// Data files compiled into the library (presets/, data/): see cmake/embed_resources.cmake.
#include <string>
#include <string_view>
#include <vector>

namespace adaptiveload {

struct Resource {
  const char* path;  // relative to the repository root, e.g. "presets/models/wan2.1-1.3b.json"
  std::string_view contents;
};

const std::vector<Resource>& embedded_resources();

// Contents of an embedded resource, or nullptr when there is none at `path`.
const std::string_view* find_resource(const std::string& path);

}  // namespace adaptiveload
