// A manifest's bytes in memory (file_text.h).
#include "adaptiveload/manifest/file_text.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "adaptiveload/util/error.h"

namespace adaptiveload {

// An uninitialised buffer of n bytes. Large ones come from their own anonymous mapping with
// transparent huge pages asked for (a 1 GB manifest then faults in ~500 pages instead of
// ~250,000).
std::shared_ptr<char> big_buffer(size_t n) {
#if defined(__linux__)
  if (n >= (size_t(1) << 21)) {
    const size_t len = (n + (size_t(1) << 21) - 1) & ~((size_t(1) << 21) - 1);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      madvise(p, len, MADV_HUGEPAGE);  // a hint: ignored where huge pages are off
      return std::shared_ptr<char>(static_cast<char*>(p), [len](char* q) { munmap(q, len); });
    }
  }
#endif
  return std::shared_ptr<char>(new char[std::max<size_t>(n, 1)], std::default_delete<char[]>());
}

// LF bytes in `s`, 16 a compare (one pass, where a memchr per line pays a call per line):
// byte counters (0 - matches) summed with psadbw every 255 blocks.
size_t count_newlines(std::string_view s) {
  const char* p = s.data();
  size_t n = s.size(), count = 0;
#if defined(__SSE2__)
  const __m128i lf = _mm_set1_epi8('\n'), zero = _mm_setzero_si128();
  while (n >= 16) {
    __m128i acc = zero;
    for (int k = 0; k < 255 && n >= 16; ++k, p += 16, n -= 16)
      acc = _mm_sub_epi8(acc,
                         _mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), lf));
    const __m128i sums = _mm_sad_epu8(acc, zero);
    count += size_t(_mm_cvtsi128_si32(sums)) + size_t(_mm_cvtsi128_si32(_mm_srli_si128(sums, 8)));
  }
#endif
  for (; n > 0; ++p, --n) count += *p == '\n';
  return count;
}

// Maps a regular, non-empty file read-only (its pages are the page cache's: no copy, no fresh
// memory); nothing (then the caller reads it) for anything else or if mapping fails.
std::optional<Manifest::Text> map_file(const std::string& path) {
#if defined(__linux__)
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    close(fd);
    return std::nullopt;
  }
  const size_t len = size_t(st.st_size);
  void* p = mmap(nullptr, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return std::nullopt;
  Manifest::Text t;
  t.hold = std::shared_ptr<char>(static_cast<char*>(p), [len](char* q) { munmap(q, len); });
  t.size = len;
  return t;
#else
  (void)path;
  return std::nullopt;
#endif
}

// Reads a whole file into one buffer (no stream copies: a 1 GB manifest takes 1 GB). A
// regular file is read straight into a buffer of its size; a pipe or a file still growing
// is read in chunks.
Manifest::Text read_whole_file(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path, "cannot open file (check the path and permissions)");
  auto fail = [&](const char* what) {
    const int err = errno;
    close(fd);
    throw InputError(path, std::string(what) + " (" + strerror(err) + ")");
  };
  struct stat st;
  size_t cap = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) cap = size_t(st.st_size);
  Manifest::Text t;
  t.hold = big_buffer(cap);
  size_t size = 0;
  for (;;) {
    if (size == cap) {
      // Past the size fstat gave (or no size): grow by doubling, copying what was read.
      char probe[1 << 16];
      const ssize_t got = read(fd, probe, sizeof probe);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail("read failed");
      if (got == 0) break;
      const size_t grown = std::max<size_t>({2 * cap, size + size_t(got), size_t(1) << 16});
      std::shared_ptr<char> bigger = big_buffer(grown);
      if (size > 0) memcpy(bigger.get(), t.hold.get(), size);
      memcpy(bigger.get() + size, probe, size_t(got));
      t.hold = std::move(bigger);
      cap = grown;
      size += size_t(got);
      continue;
    }
    const ssize_t got =
        read(fd, t.hold.get() + size, std::min<size_t>(cap - size, size_t(1) << 30));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("read failed");
    if (got == 0) break;
    size += size_t(got);
  }
  close(fd);
  t.size = size;
  return t;
}

}  // namespace adaptiveload
