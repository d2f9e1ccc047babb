#pragma once
// Streaming 64-bit fingerprint (xxHash64) of manifests and configurations.
#include <cstdint>
#include <string>

namespace adaptiveload {

class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void bytes(const void* p, size_t n);
  template <class T>
  void pod(const T& v) {
    bytes(&v, sizeof v);
  }
  void str(const std::string& s) {
    pod(uint64_t(s.size()));
    bytes(s.data(), s.size());
  }
  uint64_t digest() const;

 private:
  void* state_;
};

}  // namespace adaptiveload
