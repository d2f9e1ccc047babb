// Row kernels of the optimised CPU adaLN, written once against a simd_cpu.h struct S.
//
// Forward, per row: the row is read from memory once, converted to fp32 into a per-thread
// buffer that stays in L1/L2, and the two-pass statistics (mean, then sum of squared
// deviations) and the output pass run from that buffer. Outputs use non-temporal stores
// when the row is aligned, so the write does not first read the destination line.
// Backward, per chunk of rows: dx row by row, and the dscale / dshift / dweight / dbias
// sums accumulated in fp32 while the rows stream by (no extra pass over memory), written
// to the chunk's partial row for the driver's finalize.
//
// Included by exactly one file per path (adaln_cpu_scalar.cpp, adaln_cpu_avx2.cpp,
// adaln_cpu_avx512.cpp), which first defines AL_ROWS_TARGET as its target attribute (empty
// for scalar): every function here that touches S carries it, so S's intrinsics inline.
// Everything is in an unnamed namespace, so each path file has its own copies and the
// linker can never pick a copy compiled for one instruction set to serve another path.
#pragma once

#ifndef AL_ROWS_TARGET
#error "define AL_ROWS_TARGET (the path's target attribute) before including adaln_cpu_rows.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/adaln_cpu_paths.h"
#include "adaptiveload/kernels/half_types.h"
#include "adaptiveload/kernels/simd_cpu.h"

namespace adaptiveload {
namespace adaln_cpu {
namespace {

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

template <typename S, typename T>
bool aligned_for_stream(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (S::W * sizeof(T)) == 0;
}

// Loads row x (D elements) into fp32 buf and computes its statistics by the corrected
// two-pass method: m = sum(x) / D, then c = sum(x - m) / D and var = sum((x - m)^2) / D - c^2
// from the buffer. The mean is m + c; keeping m and c apart lets the output pass form
// (x - m) - c, which stays exact-ish when |mean| >> std (an fp32 m alone is off by up to
// half an ulp of the mean).
template <typename S, typename T>
AL_ROWS_TARGET void row_stats(const T* x, float* buf, int64_t D, float eps, float& m, float& c,
                              float& rstd) {
  using V = typename S::V;
  constexpr int W = S::W;
  V a0 = S::zero(), a1 = S::zero();
  int64_t j = 0;
  for (; j + 2 * W <= D; j += 2 * W) {
    const V v0 = S::load(x + j, W), v1 = S::load(x + j + W, W);
    S::store(buf + j, v0, W);
    S::store(buf + j + W, v1, W);
    a0 = S::add(a0, v0);
    a1 = S::add(a1, v1);
  }
  for (; j < D; j += W) {
    const int n = int(std::min<int64_t>(W, D - j));
    const V v = S::load(x + j, n);  // zero-filled past D
    S::store(buf + j, v, W);
    a0 = S::add(a0, v);
  }
  m = S::sum(S::add(a0, a1)) / float(D);
  const V mv = S::set1(m);
  V s0 = S::zero(), s1 = S::zero();
  a0 = S::zero();
  a1 = S::zero();
  j = 0;
  for (; j + 2 * W <= D; j += 2 * W) {
    const V d0 = S::sub(S::load(buf + j, W), mv);
    const V d1 = S::sub(S::load(buf + j + W, W), mv);
    s0 = S::add(s0, d0);
    s1 = S::add(s1, d1);
    a0 = S::fma(d0, d0, a0);
    a1 = S::fma(d1, d1, a1);
  }
  for (; j < D; j += W) {
    const int n = int(std::min<int64_t>(W, D - j));
    const V d = S::keep(S::sub(S::load(buf + j, W), mv), n);
    s0 = S::add(s0, d);
    a0 = S::fma(d, d, a0);
  }
  c = S::sum(S::add(s0, s1)) / float(D);
  const float var = std::max(0.f, S::sum(S::add(a0, a1)) / float(D) - c * c);
  rstd = 1.f / std::sqrt(var + eps);
}

template <typename S, typename T, typename TM>
AL_ROWS_TARGET void fwd_rows_t(const FwdShared& sh, int64_t r0, int64_t r1) {
  using V = typename S::V;
  constexpr int W = S::W;
  const AdalnParams& p = *sh.p;
  const int64_t D = p.dim, Dp = round_up(D, W) + W;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const TM* scale = static_cast<const TM*>(p.scale);
  const TM* shift = static_cast<const TM*>(p.shift);
  const float* wv = sh.w;
  const float* bv = sh.b;
  const V one = S::set1(1.f);
  const size_t n_buf = static_cast<size_t>(Dp);
  std::vector<float> buf(n_buf), A(n_buf), B(n_buf);
  int64_t cached = -1;         // sample (segment) whose folded modulation is in A, B
  int64_t b = -1, b_end = r0;  // the sample (segment) of row r and its end row
  for (int64_t r = r0; r < r1; ++r) {
    float m, c, rstd;
    row_stats<S>(x + r * p.x_stride, buf.data(), D, p.eps, m, c, rstd);
    p.mean[r] = m + c;
    p.rstd[r] = rstd;
    T* yr = y + r * p.y_stride;
    const bool nt_ok = aligned_for_stream<S>(yr);
    const V vm = S::set1(m), vc = S::set1(c), vr = S::set1(rstd);
    if (!p.per_token) {
      while (r >= b_end) {  // the next non-empty segment (a search at the range's first row)
        b = b < 0 ? segment_of(p, r) : b + 1;
        b_end = segment_begin(p, b + 1);
      }
      if (b != cached) {  // y = xhat * A + B with A = w (1 + s), B = b (1 + s) + t
        for (int64_t j = 0; j < D; j += W) {
          const int n = int(std::min<int64_t>(W, D - j));
          const V s1 = S::add(one, S::load(scale + b * p.scale_stride + j, n));
          const V t = S::load(shift + b * p.shift_stride + j, n);
          S::store(A.data() + j, S::mul(S::load(wv + j, W), s1), W);
          S::store(B.data() + j, S::fma(S::load(bv + j, W), s1, t), W);
        }
        cached = b;
      }
      for (int64_t j = 0; j < D; j += W) {
        const int n = int(std::min<int64_t>(W, D - j));
        const V xh = S::mul(S::sub(S::sub(S::load(buf.data() + j, W), vm), vc), vr);
        const V out = S::fma(xh, S::load(A.data() + j, W), S::load(B.data() + j, W));
        if (n == W && nt_ok)
          S::stream(yr + j, out);
        else
          S::store(yr + j, out, n);
      }
    } else {
      const TM* sr = scale + r * p.scale_stride;
      const TM* tr = shift + r * p.shift_stride;
      for (int64_t j = 0; j < D; j += W) {
        const int n = int(std::min<int64_t>(W, D - j));
        V nv = S::mul(S::sub(S::sub(S::load(buf.data() + j, W), vm), vc), vr);
        if (sh.affine) nv = S::fma(nv, S::load(wv + j, W), S::load(bv + j, W));
        const V s1 = S::add(one, S::load(sr + j, n));
        const V out = S::fma(nv, s1, S::load(tr + j, n));
        if (n == W && nt_ok)
          S::stream(yr + j, out);
        else
          S::store(yr + j, out, n);
      }
    }
  }
  S::fence();
}

template <typename S, typename T, typename TM>
AL_ROWS_TARGET void bwd_chunks_t(const BwdShared& sh, int64_t k0, int64_t k1) {
  using V = typename S::V;
  constexpr int W = S::W;
  const AdalnParams& p = *sh.p;
  const int64_t D = p.dim, Dp = round_up(D, W) + W;
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.dx);
  const TM* scale = static_cast<const TM*>(p.scale);
  TM* dscale = static_cast<TM*>(p.dscale);
  TM* dshift = static_cast<TM*>(p.dshift);
  const float* wv = sh.w;
  const float* bv = sh.b;
  const bool has_w = sh.has_w, affine = sh.affine;
  const bool mod_partials = sh.mod_partials, wb_partials = sh.wb_partials;
  const V one = S::set1(1.f);
  const size_t n_buf = static_cast<size_t>(Dp);
  std::vector<float> xh(n_buf), g(n_buf), s1(n_buf, 0.f);
  std::vector<float> acc(4 * n_buf);
  float* as = acc.data();
  float* at = as + Dp;
  float* aw = as + 2 * Dp;
  float* ab = as + 3 * Dp;
  int64_t cached = -1;
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t grp = sh.chunks[k].group, r0 = sh.chunks[k].r0, r1 = sh.chunks[k].r1;
    std::fill(acc.begin(), acc.end(), 0.f);
    if (!p.per_token && grp != cached) {
      for (int64_t j = 0; j < D; j += W) {
        const int n = int(std::min<int64_t>(W, D - j));
        S::store(s1.data() + j,
                 S::keep(S::add(one, S::load(scale + grp * p.scale_stride + j, n)), n), W);
      }
      cached = grp;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * p.x_stride;
      const T* gr = dy + r * p.dy_stride;
      const TM* sr = scale + r * p.scale_stride;  // used when per_token
      const V vm = S::set1(p.mean[r]), vr = S::set1(p.rstd[r]);
      V sg0 = S::zero(), sgx0 = S::zero();
      for (int64_t j = 0; j < D; j += W) {
        const int n = int(std::min<int64_t>(W, D - j));
        const V xhat = S::mul(S::sub(S::load(xr + j, n), vm), vr);
        const V gv = S::load(gr + j, n);  // zero past D: every sum below has a dy factor
        const V sv = p.per_token ? S::add(one, S::load(sr + j, n)) : S::load(s1.data() + j, W);
        const V nv = affine ? S::fma(xhat, S::load(wv + j, W), S::load(bv + j, W)) : xhat;
        const V dn = S::mul(gv, sv);
        const V dxh = has_w ? S::mul(dn, S::load(wv + j, W)) : dn;
        sg0 = S::add(sg0, dxh);
        sgx0 = S::fma(dxh, xhat, sgx0);
        S::store(xh.data() + j, xhat, W);
        S::store(g.data() + j, dxh, W);
        if (mod_partials) {
          S::store(as + j, S::fma(gv, nv, S::load(as + j, W)), W);
          S::store(at + j, S::add(gv, S::load(at + j, W)), W);
        } else if (p.per_token) {
          if (dscale) S::store(dscale + r * p.dscale_stride + j, S::mul(gv, nv), n);
          if (dshift) S::store(dshift + r * p.dshift_stride + j, gv, n);
        }
        if (wb_partials) {
          S::store(aw + j, S::fma(dn, xhat, S::load(aw + j, W)), W);
          S::store(ab + j, S::add(dn, S::load(ab + j, W)), W);
        }
      }
      const float invD = 1.f / float(D);
      const V c1 = S::set1(S::sum(sg0) * invD), c2 = S::set1(S::sum(sgx0) * invD);
      T* dxr = dx + r * p.dx_stride;
      const bool nt_ok = aligned_for_stream<S>(dxr);
      for (int64_t j = 0; j < D; j += W) {
        const int n = int(std::min<int64_t>(W, D - j));
        const V xhat = S::load(xh.data() + j, W);
        const V d = S::sub(S::sub(S::load(g.data() + j, W), c1), S::mul(xhat, c2));
        const V out = S::mul(vr, d);
        if (n == W && nt_ok)
          S::stream(dxr + j, out);
        else
          S::store(dxr + j, out, n);
      }
    }
    if (mod_partials) {
      std::copy(as, as + D, sh.ps + k * D);
      std::copy(at, at + D, sh.pt + k * D);
    }
    if (wb_partials) {
      std::copy(aw, aw + D, sh.pw + k * D);
      std::copy(ab, ab + D, sh.pb + k * D);
    }
  }
  S::fence();
}

// Dtype dispatch, once per call (a thread's row range or chunk range).
template <typename S, typename T>
void fwd_rows_x(const FwdShared& sh, int64_t r0, int64_t r1) {
  const DType m = sh.p->mod_dtype;
  if (m == DType::F32)
    fwd_rows_t<S, T, float>(sh, r0, r1);
  else if (m == DType::BF16)
    fwd_rows_t<S, T, bf16_t>(sh, r0, r1);
  else
    fwd_rows_t<S, T, f16_t>(sh, r0, r1);
}
template <typename S>
void fwd_rows(const FwdShared& sh, int64_t r0, int64_t r1) {
  const DType t = sh.p->x_dtype;
  if (t == DType::F32)
    fwd_rows_x<S, float>(sh, r0, r1);
  else if (t == DType::BF16)
    fwd_rows_x<S, bf16_t>(sh, r0, r1);
  else
    fwd_rows_x<S, f16_t>(sh, r0, r1);
}

template <typename S, typename T>
void bwd_chunks_x(const BwdShared& sh, int64_t k0, int64_t k1) {
  const DType m = sh.p->mod_dtype;
  if (m == DType::F32)
    bwd_chunks_t<S, T, float>(sh, k0, k1);
  else if (m == DType::BF16)
    bwd_chunks_t<S, T, bf16_t>(sh, k0, k1);
  else
    bwd_chunks_t<S, T, f16_t>(sh, k0, k1);
}
template <typename S>
void bwd_chunks(const BwdShared& sh, int64_t k0, int64_t k1) {
  const DType t = sh.p->x_dtype;
  if (t == DType::F32)
    bwd_chunks_x<S, float>(sh, k0, k1);
  else if (t == DType::BF16)
    bwd_chunks_x<S, bf16_t>(sh, k0, k1);
  else
    bwd_chunks_x<S, f16_t>(sh, k0, k1);
}

template <typename S>
RowKernels row_kernels() {
  RowKernels k;
  k.fwd_rows = &fwd_rows<S>;
  k.bwd_chunks = &bwd_chunks<S>;
  return k;
}

}  // namespace
}  // namespace adaln_cpu
}  // namespace adaptiveload
