#include "adaptiveload/util/rng.h"

namespace adaptiveload {

Rng::Rng(uint64_t seed, uint64_t stream) : gen_(seed, stream) {}

Rng Rng::for_purpose(uint64_t seed, uint64_t epoch, uint64_t purpose) {
  return Rng(mix64(seed ^ mix64(epoch + 0x9e3779b97f4a7c15ULL)), mix64(purpose) >> 1);
}

Rng Rng::for_segment(uint64_t seed, uint64_t epoch, uint64_t segment, uint64_t purpose) {
  return for_purpose(seed, epoch, purpose | (segment << 8));
}

uint32_t Rng::next_u32() { return gen_(); }

uint32_t Rng::below(uint32_t bound) {
  uint32_t threshold = (0u - bound) % bound;
  for (;;) {
    uint32_t r = next_u32();
    if (r >= threshold) return r % bound;
  }
}

uint64_t Rng::below64(uint64_t bound) {
  if (bound <= 0xffffffffull) return below(static_cast<uint32_t>(bound));
  uint64_t threshold = (0ull - bound) % bound;
  for (;;) {
    uint64_t r = (static_cast<uint64_t>(next_u32()) << 32) | next_u32();
    if (r >= threshold) return r % bound;
  }
}

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace adaptiveload
