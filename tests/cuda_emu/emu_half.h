// cuda_emu: the bf16 / fp16 storage types of cuda_bf16.h and cuda_fp16.h and the
// conversions the kernels use. Rounding is round-to-nearest-even, NaN stays a quiet NaN,
// fp16 handles subnormals and overflows to inf, as the device converters do. Checked
// against the project's CPU converters (src/adaptiveload/kernels/half_types.h) for every
// 16-bit pattern and a sweep of fp32 values by the emulator's self-test.
#pragma once

#include <cstdint>
#include <cstring>

namespace cuda_emu {
namespace half_bits {

inline float u2f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bf16_to_f(uint16_t h) { return u2f(uint32_t(h) << 16); }
inline uint16_t f_to_bf16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float f16_to_f(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return u2f(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return u2f(sign | ((exp + 112u) << 23) | (mant << 13));
  // zero or subnormal: mant * 2^-24, exact in fp32
  const float v = float(mant) * u2f(0x33800000u);
  return sign ? -v : v;
}
inline uint16_t f_to_f16(float f) {
  const uint32_t u = f2u(f), a = u & 0x7fffffffu;
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {                                  // subnormal result: units of 2^-24
    if (a < 0x33000000u) return sign;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u, sh = 126u - (a >> 23);
    uint32_t r = m >> sh;
    const uint32_t rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = a - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}

}  // namespace half_bits
}  // namespace cuda_emu

struct __nv_bfloat16 {
  uint16_t __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(cuda_emu::half_bits::f_to_bf16(f)) {}
  operator float() const { return cuda_emu::half_bits::bf16_to_f(__x); }
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
struct __half {
  uint16_t __x;
  __half() = default;
  __half(float f) : __x(cuda_emu::half_bits::f_to_f16(f)) {}
  operator float() const { return cuda_emu::half_bits::f16_to_f(__x); }
};
struct alignas(4) __half2 {
  __half x, y;
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
typedef __half half;
typedef __half2 half2;

inline float __bfloat162float(__nv_bfloat16 h) { return cuda_emu::half_bits::bf16_to_f(h.__x); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 h;
  h.__x = u;
  return h;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return __ushort_as_bfloat16(cuda_emu::half_bits::f_to_bf16(f));
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float2 __bfloat1622float2(__nv_bfloat162 h) {
  return {__bfloat162float(h.x), __bfloat162float(h.y)};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }

inline float __half2float(__half h) { return cuda_emu::half_bits::f16_to_f(h.__x); }
inline __half __ushort_as_half(unsigned short u) {
  __half h;
  h.__x = u;
  return h;
}
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __float2half_rn(float f) {
  return __ushort_as_half(cuda_emu::half_bits::f_to_f16(f));
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline __half2 __floats2half2_rn(float a, float b) {
  return {__float2half_rn(a), __float2half_rn(b)};
}
inline __half2 __float22half2_rn(float2 f) { return __floats2half2_rn(f.x, f.y); }
