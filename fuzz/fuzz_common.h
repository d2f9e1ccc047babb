#pragma once
// Shared helpers of the libFuzzer targets (fuzz/README.md). A target may let only the
// library's documented exceptions (InputError, ConfigError) escape into `expected(...)`;
// any other exception, a crash, a sanitizer report or a failed AL_FUZZ_CHECK is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "adaptiveload/util/error.h"

#define AL_FUZZ_CHECK(cond, msg)                                                                 \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "AL_FUZZ_CHECK failed at %s:%d: %s: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(msg).c_str());                                                    \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

namespace adaptiveload::fuzz {

// Runs f(); InputError / ConfigError are the documented outcomes of bad input (returns
// false); anything else aborts with its message so libFuzzer records the input.
template <class F>
bool expected(F&& f) {
  try {
    f();
    return true;
  } catch (const InputError&) {
    return false;
  } catch (const ConfigError&) {
    return false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "undocumented exception escaped: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "undocumented non-std exception escaped\n");
    std::abort();
  }
}

// Consumes fuzz bytes front to back; past the end every read is 0.
class Bytes {
 public:
  Bytes(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  uint8_t u8() { return pos_ < n_ ? d_[pos_++] : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | u8();
    return v;
  }
  uint32_t below(uint32_t n) { return n ? u32() % n : 0; }
  size_t left() const { return n_ - pos_; }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t pos_ = 0;
};

// A file holding `data` for readers that take a path (ProfileCost, read_measurements);
// one per process, rewritten each run.
inline std::string write_temp(const uint8_t* data, size_t size, const char* suffix) {
  const std::string path = "/tmp/al_fuzz_" + std::to_string(getpid()) + suffix;
  FILE* f = std::fopen(path.c_str(), "wb");
  AL_FUZZ_CHECK(f != nullptr, "cannot write " + path);
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

}  // namespace adaptiveload::fuzz
