// bf16 / fp16 storage types and their conversions to and from fp32, for the CPU code.
//
// Rounding is round-to-nearest-even; NaN stays NaN (quiet, sign kept); fp16 handles
// subnormals and overflows to +-inf, as the hardware converters do (F16C vcvtps2ph,
// CUDA __float2half_rn), so a scalar tail and a vector body give the same bits.
#pragma once

#include <cstdint>
#include <cstring>

namespace adaptiveload {

// Storage-only 16-bit types: arithmetic is always done in fp32.
struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};
static_assert(sizeof(bf16_t) == 2 && sizeof(f16_t) == 2, "16-bit storage types");

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_to_float(sign);
  // Subnormal: value = mant * 2^-24; normalise.
  int e = -1;
  do {
    ++e;
    mant <<= 1;
  } while ((mant & 0x400u) == 0);
  return bits_to_float(sign | (uint32_t(112 - e) << 23) | ((mant & 0x3ffu) << 13));
}

inline uint16_t float_to_f16(float f) {
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {
    // Result is subnormal (or zero): |f| < 2^-14. Units of 2^-24, round half to even.
    if (a < 0x33000000u) return sign;  // < 2^-25: rounds to zero
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = a - 0x38000000u;  // rebias exponent 127 -> 15 (in place, mantissa kept)
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}

// Uniform access used by templated loops: to_float(T) and from_float<T>(float).
inline float to_float(float v) { return v; }
inline float to_float(bf16_t v) { return bf16_to_float(v.bits); }
inline float to_float(f16_t v) { return f16_to_float(v.bits); }

template <typename T>
T from_float(float v);
template <>
inline float from_float<float>(float v) {
  return v;
}
template <>
inline bf16_t from_float<bf16_t>(float v) {
  return bf16_t{float_to_bf16(v)};
}
template <>
inline f16_t from_float<f16_t>(float v) {
  return f16_t{float_to_f16(v)};
}

}  // namespace adaptiveload
