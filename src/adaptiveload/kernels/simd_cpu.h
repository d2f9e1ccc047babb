// A tiny SIMD layer for the CPU adaLN path, one struct per instruction set, same interface:
//
//   simd::Scalar  1 lane, plain C++ (any CPU)
//   simd::Avx2    8 fp32 lanes, AVX2 + FMA + F16C
//   simd::Avx512  16 fp32 lanes, AVX-512 F + BW + VL (+ the AVX2 set)
//
// The row kernels (adaln_cpu_rows.h) are written once against this interface. Loads and
// stores convert the storage type (fp32 / bf16 / fp16) in registers; `n` < W lanes are
// masked (zero-filled on load, untouched on store), so a row needs no scalar tail loop.
//
// The library is compiled for the baseline x86-64 target: the vector structs carry their
// instruction set in a per-function target attribute (AL_TARGET_AVX2 / AL_TARGET_AVX512),
// so no file needs -mavx2 / -mavx512f, and a caller must itself carry the same attribute
// (the intrinsics only inline into such functions) and run only after a CPU check
// (cpu_simd_supported() in adaln.h). A bf16 / fp16 conversion gives the same bits on every
// path as float_to_bf16() / float_to_f16() in half_types.h.
#pragma once

#include <cstdint>
#include <cstring>

#include "adaptiveload/kernels/half_types.h"

#if defined(__x86_64__) || defined(__i386__)
#define AL_SIMD_X86 1
// GCC 12 warns about the deliberately undefined registers inside its own AVX-512 headers
// (GCC bug 105593, fixed in 12.3 / 13); the warning is not about our code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define AL_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define AL_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#else
#define AL_SIMD_X86 0
#endif

namespace adaptiveload {
namespace simd {

// One lane, plain C++: the path for CPUs without AVX2 (and for other architectures).
struct Scalar {
  static constexpr int W = 1;
  using V = float;
  static const char* name() { return "scalar"; }

  static V zero() { return 0.f; }
  static V set1(float v) { return v; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static float sum(V v) { return v; }
  static V keep(V v, int) { return v; }
  template <typename T>
  static V load(const T* p, int) {
    return to_float(*p);
  }
  template <typename T>
  static void store(T* p, V v, int) {
    *p = from_float<T>(v);
  }
  template <typename T>
  static void stream(T* p, V v) {
    *p = from_float<T>(v);
  }
  static void fence() {}
};

#if AL_SIMD_X86

// 8 fp32 lanes. AVX2 has masked 32-bit loads / stores but no 16-bit ones, so a partial
// vector of bf16 / fp16 goes through a small stack buffer (only the last vector of a row).
struct Avx2 {
  static constexpr int W = 8;
  using V = __m256;
  static const char* name() { return "avx2"; }

  AL_TARGET_AVX2 static V zero() { return _mm256_setzero_ps(); }
  AL_TARGET_AVX2 static V set1(float v) { return _mm256_set1_ps(v); }
  AL_TARGET_AVX2 static V add(V a, V b) { return _mm256_add_ps(a, b); }
  AL_TARGET_AVX2 static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  AL_TARGET_AVX2 static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  AL_TARGET_AVX2 static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c
  AL_TARGET_AVX2 static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // Lanes 0 .. n-1 all ones.
  AL_TARGET_AVX2 static __m256i mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  AL_TARGET_AVX2 static V keep(V v, int n) {
    return n >= W ? v : _mm256_and_ps(v, _mm256_castsi256_ps(mask(n)));
  }

  AL_TARGET_AVX2 static V load(const float* p, int n) {
    return n >= W ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask(n));
  }
  AL_TARGET_AVX2 static __m128i load16(const void* p, int n) {
    if (n >= W) return _mm_loadu_si128(static_cast<const __m128i*>(p));
    alignas(16) uint16_t t[W] = {};
    std::memcpy(t, p, size_t(n) * 2);
    return _mm_load_si128(reinterpret_cast<const __m128i*>(t));
  }
  AL_TARGET_AVX2 static V load(const bf16_t* p, int n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load16(p, n)), 16));
  }
  AL_TARGET_AVX2 static V load(const f16_t* p, int n) { return _mm256_cvtph_ps(load16(p, n)); }

  // Round-to-nearest-even with NaN kept quiet, bit-identical to float_to_bf16().
  AL_TARGET_AVX2 static __m128i to_bf16(V v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    r = _mm256_srli_epi32(r, 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    // Every lane is in [0, 0xffff], so the unsigned-saturating pack is exact.
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }
  AL_TARGET_AVX2 static __m128i to_f16(V v) {
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  }
  AL_TARGET_AVX2 static void store16(void* p, __m128i h, int n) {
    if (n >= W) {
      _mm_storeu_si128(static_cast<__m128i*>(p), h);
      return;
    }
    alignas(16) uint16_t t[W];
    _mm_store_si128(reinterpret_cast<__m128i*>(t), h);
    std::memcpy(p, t, size_t(n) * 2);
  }
  AL_TARGET_AVX2 static void store(float* p, V v, int n) {
    if (n >= W)
      _mm256_storeu_ps(p, v);
    else
      _mm256_maskstore_ps(p, mask(n), v);
  }
  AL_TARGET_AVX2 static void store(bf16_t* p, V v, int n) { store16(p, to_bf16(v), n); }
  AL_TARGET_AVX2 static void store(f16_t* p, V v, int n) { store16(p, to_f16(v), n); }

  // Non-temporal stores of a full vector; p must be aligned to W * sizeof(T).
  AL_TARGET_AVX2 static void stream(float* p, V v) { _mm256_stream_ps(p, v); }
  AL_TARGET_AVX2 static void stream(bf16_t* p, V v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), to_bf16(v));
  }
  AL_TARGET_AVX2 static void stream(f16_t* p, V v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), to_f16(v));
  }
  AL_TARGET_AVX2 static void fence() { _mm_sfence(); }
};

// 16 fp32 lanes with AVX-512 mask registers for the row tails.
struct Avx512 {
  static constexpr int W = 16;
  using V = __m512;
  static const char* name() { return "avx512"; }

  AL_TARGET_AVX512 static V zero() { return _mm512_setzero_ps(); }
  AL_TARGET_AVX512 static V set1(float v) { return _mm512_set1_ps(v); }
  AL_TARGET_AVX512 static V add(V a, V b) { return _mm512_add_ps(a, b); }
  AL_TARGET_AVX512 static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  AL_TARGET_AVX512 static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  AL_TARGET_AVX512 static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
  AL_TARGET_AVX512 static float sum(V v) { return _mm512_reduce_add_ps(v); }
  AL_TARGET_AVX512 static __mmask16 mask(int n) { return __mmask16((1u << n) - 1u); }
  AL_TARGET_AVX512 static V keep(V v, int n) {
    return n >= W ? v : _mm512_maskz_mov_ps(mask(n), v);
  }

  AL_TARGET_AVX512 static V load(const float* p, int n) {
    return n >= W ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask(n), p);
  }
  AL_TARGET_AVX512 static __m256i load16(const void* p, int n) {
    return n >= W ? _mm256_loadu_si256(static_cast<const __m256i*>(p))
                  : _mm256_maskz_loadu_epi16(mask(n), p);
  }
  AL_TARGET_AVX512 static V load(const bf16_t* p, int n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load16(p, n)), 16));
  }
  AL_TARGET_AVX512 static V load(const f16_t* p, int n) { return _mm512_cvtph_ps(load16(p, n)); }

  // Round-to-nearest-even with NaN kept quiet, bit-identical to float_to_bf16().
  AL_TARGET_AVX512 static __m256i to_bf16(V v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan,
                              _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
  }
  AL_TARGET_AVX512 static __m256i to_f16(V v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  AL_TARGET_AVX512 static void store16(void* p, __m256i h, int n) {
    if (n >= W)
      _mm256_storeu_si256(static_cast<__m256i*>(p), h);
    else
      _mm256_mask_storeu_epi16(p, mask(n), h);
  }
  AL_TARGET_AVX512 static void store(float* p, V v, int n) {
    if (n >= W)
      _mm512_storeu_ps(p, v);
    else
      _mm512_mask_storeu_ps(p, mask(n), v);
  }
  AL_TARGET_AVX512 static void store(bf16_t* p, V v, int n) { store16(p, to_bf16(v), n); }
  AL_TARGET_AVX512 static void store(f16_t* p, V v, int n) { store16(p, to_f16(v), n); }

  // Non-temporal stores of a full vector; p must be aligned to W * sizeof(T).
  AL_TARGET_AVX512 static void stream(float* p, V v) { _mm512_stream_ps(p, v); }
  AL_TARGET_AVX512 static void stream(bf16_t* p, V v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), to_bf16(v));
  }
  AL_TARGET_AVX512 static void stream(f16_t* p, V v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), to_f16(v));
  }
  AL_TARGET_AVX512 static void fence() { _mm_sfence(); }
};

#endif  // AL_SIMD_X86

}  // namespace simd
}  // namespace adaptiveload
