#include "adaptiveload/presets/resources.h"

namespace adaptiveload {

const std::string_view* find_resource(const std::string& path) {
  for (const Resource& r : embedded_resources()) {
    if (path == r.path) return &r.contents;
  }
  return nullptr;
}

}  // namespace adaptiveload
