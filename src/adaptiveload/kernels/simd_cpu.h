// A tiny SIMD layer for the CPU adaLN path: 16 fp32 lanes on AVX-512 (F + BW + VL), one
// lane otherwise. The kernels are written once against it. Loads and stores convert the
// storage type (fp32 / bf16 / fp16) in registers; `n` < W lanes are masked (zero-filled
// on load, untouched on store), so a row needs no scalar tail loop.
#pragma once

#include <cstdint>

#include "adaptiveload/kernels/half_types.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define AL_ADALN_AVX512 1
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
#else
#define AL_ADALN_AVX512 0
#endif

namespace adaptiveload {
namespace simd {

#if AL_ADALN_AVX512

struct Simd {
  static constexpr int W = 16;
  using V = __m512;
  static const char* name() { return "avx512"; }

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  static __mmask16 mask(int n) { return __mmask16((1u << n) - 1u); }
  static V keep(V v, int n) { return n >= W ? v : _mm512_maskz_mov_ps(mask(n), v); }

  static V load(const float* p, int n) {
    return n >= W ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask(n), p);
  }
  static __m256i load16(const void* p, int n) {
    return n >= W ? _mm256_loadu_si256(static_cast<const __m256i*>(p))
                  : _mm256_maskz_loadu_epi16(mask(n), p);
  }
  static V load(const bf16_t* p, int n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load16(p, n)), 16));
  }
  static V load(const f16_t* p, int n) { return _mm512_cvtph_ps(load16(p, n)); }

  // Round-to-nearest-even with NaN kept quiet, bit-identical to float_to_bf16().
  static __m256i to_bf16(V v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(
        r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
  }
  static __m256i to_f16(V v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static void store16(void* p, __m256i h, int n) {
    if (n >= W)
      _mm256_storeu_si256(static_cast<__m256i*>(p), h);
    else
      _mm256_mask_storeu_epi16(p, mask(n), h);
  }
  static void store(float* p, V v, int n) {
    if (n >= W)
      _mm512_storeu_ps(p, v);
    else
      _mm512_mask_storeu_ps(p, mask(n), v);
  }
  static void store(bf16_t* p, V v, int n) { store16(p, to_bf16(v), n); }
  static void store(f16_t* p, V v, int n) { store16(p, to_f16(v), n); }

  // Non-temporal stores of a full vector; p must be aligned to W * sizeof(T).
  static void stream(float* p, V v) { _mm512_stream_ps(p, v); }
  static void stream(bf16_t* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), to_bf16(v)); }
  static void stream(f16_t* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), to_f16(v)); }
  static void fence() { _mm_sfence(); }
};

#else  // scalar fallback: one lane, same interface

struct Simd {
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

#endif

}  // namespace simd
}  // namespace adaptiveload
