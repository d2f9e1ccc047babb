#pragma once
// The planner's only source of randomness: PCG32 (pcg-cpp, O'Neill 2014; XSH-RR 64/32),
// with integer-only bounded draws and shuffles written here. std::*_distribution is not
// used because its output differs between standard libraries; this generator gives the
// same sequence on every machine and compiler. Test vector (tests/test_rng.cpp): seed 42,
// stream 54 -> 0xa15c02b7 0x7b47f409 0xba1d3330 0x83d2f293 0xbfa4784b 0xcbed606e.
#include <cstdint>
#include <pcg_random.hpp>
#include <utility>
#include <vector>

namespace adaptiveload {

class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream);
  // Derives a generator for one purpose of one epoch: every (seed, epoch, purpose) triple
  // gets an independent stream, so adding a purpose never shifts the others' sequences.
  static Rng for_purpose(uint64_t seed, uint64_t epoch, uint64_t purpose);
  // The same for one segment of an epoch (an elastic resume plans the rest of an epoch as
  // segment 1, 2, ..; segment 0 is the uninterrupted epoch): purpose | segment << 8, so
  // purposes stay below 256 and segment 0 keeps the epoch's own streams.
  static Rng for_segment(uint64_t seed, uint64_t epoch, uint64_t segment, uint64_t purpose);

  uint32_t next_u32();
  // Uniform integer in [0, bound), bound >= 1, unbiased (rejection of the low
  // 2^32 mod bound values, as pcg32's own bounded operator does).
  uint32_t below(uint32_t bound);
  // Uniform integer in [0, bound) for 64-bit bounds (two draws, rejection).
  uint64_t below64(uint64_t bound);

  // Fisher-Yates from the back: for i = n-1 .. 1, swap(v[i], v[below(i+1)]).
  template <class T>
  void shuffle(T* v, size_t n) {
    for (size_t i = n; i > 1; --i) {
      size_t j = n <= 0xffffffffull ? below(static_cast<uint32_t>(i)) : below64(i);
      std::swap(v[i - 1], v[j]);
    }
  }
  template <class T>
  void shuffle(std::vector<T>& v) {
    shuffle(v.data(), v.size());
  }

 private:
  pcg32 gen_;
};

// splitmix64 finaliser: mixes integers into well-spread 64-bit seeds.
uint64_t mix64(uint64_t x);

}  // namespace adaptiveload
