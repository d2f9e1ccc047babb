// Optimised CPU path of the fused adaLN forward and backward.
//
// Threads (OpenMP) own contiguous row ranges (forward) or fixed row chunks (backward);
// within a row, SIMD over D via simd_cpu.h (AVX-512 when compiled with it). A row is read
// from memory once: it is converted to fp32 into a per-thread buffer that stays in L1/L2,
// and the two-pass statistics (mean, then sum of squared deviations) and the output pass
// run from that buffer. Outputs use non-temporal stores when the row is aligned, so the
// write does not first read the destination line.
//
// Backward reductions (dscale / dshift over the rows of a sample, dweight / dbias over all
// rows) are accumulated per chunk of rows in fp32 while the rows stream by (no extra pass
// over memory), written to one partial row per chunk, and summed in chunk order by a
// finalize step. Chunks depend only on (N, D, L), never on the thread count or timing, so
// the results are bit-identical for any OMP_NUM_THREADS.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/half_types.h"
#include "adaptiveload/kernels/simd_cpu.h"

namespace adaptiveload {
namespace {

using simd::Simd;
using V = Simd::V;
constexpr int W = Simd::W;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

template <typename T>
bool aligned_for_stream(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (W * sizeof(T)) == 0;
}

// fp32 copy of an optional [D] vector (weight / bias), padded to a multiple of W with
// zeros; `fill` is used when the pointer is null.
std::vector<float> to_f32_vec(const void* p, DType t, int64_t D, float fill) {
  std::vector<float> out(size_t(round_up(D, W) + W), 0.f);
  for (int64_t j = 0; j < D; ++j) {
    if (p == nullptr)
      out[j] = fill;
    else if (t == DType::F32)
      out[j] = static_cast<const float*>(p)[j];
    else if (t == DType::BF16)
      out[j] = bf16_to_float(static_cast<const uint16_t*>(p)[j]);
    else
      out[j] = f16_to_float(static_cast<const uint16_t*>(p)[j]);
  }
  return out;
}

// Loads row x (D elements) into fp32 buf and computes its statistics by the corrected
// two-pass method: m = sum(x) / D, then c = sum(x - m) / D and var = sum((x - m)^2) / D - c^2
// from the buffer. The mean is m + c; keeping m and c apart lets the output pass form
// (x - m) - c, which stays exact-ish when |mean| >> std (an fp32 m alone is off by up to
// half an ulp of the mean).
template <typename T>
void row_stats(const T* x, float* buf, int64_t D, float eps, float& m, float& c, float& rstd) {
  V a0 = Simd::zero(), a1 = Simd::zero();
  int64_t j = 0;
  for (; j + 2 * W <= D; j += 2 * W) {
    const V v0 = Simd::load(x + j, W), v1 = Simd::load(x + j + W, W);
    Simd::store(buf + j, v0, W);
    Simd::store(buf + j + W, v1, W);
    a0 = Simd::add(a0, v0);
    a1 = Simd::add(a1, v1);
  }
  for (; j < D; j += W) {
    const int n = int(std::min<int64_t>(W, D - j));
    const V v = Simd::load(x + j, n);  // zero-filled past D
    Simd::store(buf + j, v, W);
    a0 = Simd::add(a0, v);
  }
  m = Simd::sum(Simd::add(a0, a1)) / float(D);
  const V mv = Simd::set1(m);
  V s0 = Simd::zero(), s1 = Simd::zero();
  a0 = Simd::zero();
  a1 = Simd::zero();
  j = 0;
  for (; j + 2 * W <= D; j += 2 * W) {
    const V d0 = Simd::sub(Simd::load(buf + j, W), mv);
    const V d1 = Simd::sub(Simd::load(buf + j + W, W), mv);
    s0 = Simd::add(s0, d0);
    s1 = Simd::add(s1, d1);
    a0 = Simd::fma(d0, d0, a0);
    a1 = Simd::fma(d1, d1, a1);
  }
  for (; j < D; j += W) {
    const int n = int(std::min<int64_t>(W, D - j));
    const V d = Simd::keep(Simd::sub(Simd::load(buf + j, W), mv), n);
    s0 = Simd::add(s0, d);
    a0 = Simd::fma(d, d, a0);
  }
  c = Simd::sum(Simd::add(s0, s1)) / float(D);
  const float var = std::max(0.f, Simd::sum(Simd::add(a0, a1)) / float(D) - c * c);
  rstd = 1.f / std::sqrt(var + eps);
}

template <typename T, typename TM>
void fwd_impl(const AdalnParams& p) {
  const int64_t N = p.rows, D = p.dim, Dp = round_up(D, W) + W;
  const bool affine = p.weight != nullptr || p.bias != nullptr;
  const std::vector<float> wv = to_f32_vec(p.weight, p.weight_dtype, D, 1.f);
  const std::vector<float> bv = to_f32_vec(p.bias, p.weight_dtype, D, 0.f);
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const TM* scale = static_cast<const TM*>(p.scale);
  const TM* shift = static_cast<const TM*>(p.shift);
  const V one = Simd::set1(1.f);

#pragma omp parallel if (N * D > 16384)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t r0 = N * tid / nt, r1 = N * (tid + 1) / nt;
    std::vector<float> buf(static_cast<size_t>(Dp)), A(static_cast<size_t>(Dp)), B(static_cast<size_t>(Dp));
    int64_t cached = -1;  // sample whose folded modulation is in A, B
    for (int64_t r = r0; r < r1; ++r) {
      float m, c, rstd;
      row_stats(x + r * p.x_stride, buf.data(), D, p.eps, m, c, rstd);
      p.mean[r] = m + c;
      p.rstd[r] = rstd;
      T* yr = y + r * p.y_stride;
      const bool nt_ok = aligned_for_stream(yr);
      const V vm = Simd::set1(m), vc = Simd::set1(c), vr = Simd::set1(rstd);
      if (!p.per_token) {
        const int64_t b = r / p.rows_per_sample;
        if (b != cached) {  // y = xhat * A + B with A = w (1 + s), B = b (1 + s) + t
          for (int64_t j = 0; j < D; j += W) {
            const int n = int(std::min<int64_t>(W, D - j));
            const V s1 = Simd::add(one, Simd::load(scale + b * p.scale_stride + j, n));
            const V t = Simd::load(shift + b * p.shift_stride + j, n);
            Simd::store(A.data() + j, Simd::mul(Simd::load(wv.data() + j, W), s1), W);
            Simd::store(B.data() + j, Simd::fma(Simd::load(bv.data() + j, W), s1, t), W);
          }
          cached = b;
        }
        for (int64_t j = 0; j < D; j += W) {
          const int n = int(std::min<int64_t>(W, D - j));
          const V xh = Simd::mul(Simd::sub(Simd::sub(Simd::load(buf.data() + j, W), vm), vc), vr);
          const V out = Simd::fma(xh, Simd::load(A.data() + j, W), Simd::load(B.data() + j, W));
          if (n == W && nt_ok)
            Simd::stream(yr + j, out);
          else
            Simd::store(yr + j, out, n);
        }
      } else {
        const TM* sr = scale + r * p.scale_stride;
        const TM* tr = shift + r * p.shift_stride;
        for (int64_t j = 0; j < D; j += W) {
          const int n = int(std::min<int64_t>(W, D - j));
          V nv = Simd::mul(Simd::sub(Simd::sub(Simd::load(buf.data() + j, W), vm), vc), vr);
          if (affine) nv = Simd::fma(nv, Simd::load(wv.data() + j, W), Simd::load(bv.data() + j, W));
          const V s1 = Simd::add(one, Simd::load(sr + j, n));
          const V out = Simd::fma(nv, s1, Simd::load(tr + j, n));
          if (n == W && nt_ok)
            Simd::stream(yr + j, out);
          else
            Simd::store(yr + j, out, n);
        }
      }
    }
    Simd::fence();
  }
}

// Rows per reduction chunk: a function of D only (about 128K elements per chunk), so the
// partition, and with it every rounding, is independent of the thread count.
int64_t chunk_rows(int64_t D) { return std::clamp<int64_t>(131072 / std::max<int64_t>(D, 1), 8, 1024); }

template <typename T, typename TM>
void bwd_impl(const AdalnParams& p) {
  const int64_t N = p.rows, D = p.dim, Dp = round_up(D, W) + W;
  const bool has_w = p.weight != nullptr, affine = has_w || p.bias != nullptr;
  const bool mod_partials = !p.per_token && (p.dscale != nullptr || p.dshift != nullptr);
  const bool wb_partials = p.dweight != nullptr || p.dbias != nullptr;
  const std::vector<float> wv = to_f32_vec(p.weight, p.weight_dtype, D, 1.f);
  const std::vector<float> bv = to_f32_vec(p.bias, p.weight_dtype, D, 0.f);
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.dx);
  const TM* scale = static_cast<const TM*>(p.scale);
  TM* dscale = static_cast<TM*>(p.dscale);
  TM* dshift = static_cast<TM*>(p.dshift);

  // Chunks never straddle a sample, so a chunk's dscale / dshift partial has one owner.
  const int64_t C = chunk_rows(D);
  const int64_t L = p.per_token ? N : p.rows_per_sample;
  const int64_t groups = p.per_token ? (N > 0 ? 1 : 0) : p.batch;
  const int64_t cps = L > 0 ? (L + C - 1) / C : 0;  // chunks per sample (group)
  const int64_t K = groups * cps;
  // Partial sums [slot][K][D]: slot 0 dscale, 1 dshift, 2 dweight, 3 dbias.
  const int64_t nslots = wb_partials ? 4 : (mod_partials ? 2 : 0);
  std::vector<float> part(size_t(nslots * K * D));
  float* ps = part.data();
  float* pt = ps + K * D;
  float* pw = ps + 2 * K * D;
  float* pb = ps + 3 * K * D;
  const V one = Simd::set1(1.f);

#pragma omp parallel if (N * D > 16384)
  {
    std::vector<float> xh(static_cast<size_t>(Dp)), g(static_cast<size_t>(Dp)), s1(static_cast<size_t>(Dp), 0.f);
    std::vector<float> acc(size_t(4 * Dp));
    float* as = acc.data();
    float* at = as + Dp;
    float* aw = as + 2 * Dp;
    float* ab = as + 3 * Dp;
    int64_t cached = -1;
#pragma omp for schedule(static)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t grp = k / cps;
      const int64_t r0 = grp * L + (k % cps) * C, r1 = std::min(r0 + C, (grp + 1) * L);
      std::fill(acc.begin(), acc.end(), 0.f);
      if (!p.per_token && grp != cached) {
        for (int64_t j = 0; j < D; j += W) {
          const int n = int(std::min<int64_t>(W, D - j));
          Simd::store(s1.data() + j, Simd::keep(Simd::add(one, Simd::load(scale + grp * p.scale_stride + j, n)), n), W);
        }
        cached = grp;
      }
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * p.x_stride;
        const T* gr = dy + r * p.dy_stride;
        const TM* sr = scale + r * p.scale_stride;  // used when per_token
        const V vm = Simd::set1(p.mean[r]), vr = Simd::set1(p.rstd[r]);
        V sg0 = Simd::zero(), sgx0 = Simd::zero();
        for (int64_t j = 0; j < D; j += W) {
          const int n = int(std::min<int64_t>(W, D - j));
          const V xhat = Simd::mul(Simd::sub(Simd::load(xr + j, n), vm), vr);
          const V gv = Simd::load(gr + j, n);  // zero past D: every sum below has a dy factor
          const V sv = p.per_token ? Simd::add(one, Simd::load(sr + j, n)) : Simd::load(s1.data() + j, W);
          const V nv = affine ? Simd::fma(xhat, Simd::load(wv.data() + j, W), Simd::load(bv.data() + j, W)) : xhat;
          const V dn = Simd::mul(gv, sv);
          const V dxh = has_w ? Simd::mul(dn, Simd::load(wv.data() + j, W)) : dn;
          sg0 = Simd::add(sg0, dxh);
          sgx0 = Simd::fma(dxh, xhat, sgx0);
          Simd::store(xh.data() + j, xhat, W);
          Simd::store(g.data() + j, dxh, W);
          if (mod_partials) {
            Simd::store(as + j, Simd::fma(gv, nv, Simd::load(as + j, W)), W);
            Simd::store(at + j, Simd::add(gv, Simd::load(at + j, W)), W);
          } else if (p.per_token) {
            if (dscale) Simd::store(dscale + r * p.dscale_stride + j, Simd::mul(gv, nv), n);
            if (dshift) Simd::store(dshift + r * p.dshift_stride + j, gv, n);
          }
          if (wb_partials) {
            Simd::store(aw + j, Simd::fma(dn, xhat, Simd::load(aw + j, W)), W);
            Simd::store(ab + j, Simd::add(dn, Simd::load(ab + j, W)), W);
          }
        }
        const float invD = 1.f / float(D);
        const V c1 = Simd::set1(Simd::sum(sg0) * invD), c2 = Simd::set1(Simd::sum(sgx0) * invD);
        T* dxr = dx + r * p.dx_stride;
        const bool nt_ok = aligned_for_stream(dxr);
        for (int64_t j = 0; j < D; j += W) {
          const int n = int(std::min<int64_t>(W, D - j));
          const V xhat = Simd::load(xh.data() + j, W);
          const V d = Simd::sub(Simd::sub(Simd::load(g.data() + j, W), c1), Simd::mul(xhat, c2));
          const V out = Simd::mul(vr, d);
          if (n == W && nt_ok)
            Simd::stream(dxr + j, out);
          else
            Simd::store(dxr + j, out, n);
        }
      }
      if (mod_partials) {
        std::copy(as, as + D, ps + k * D);
        std::copy(at, at + D, pt + k * D);
      }
      if (wb_partials) {
        std::copy(aw, aw + D, pw + k * D);
        std::copy(ab, ab + D, pb + k * D);
      }
    }
    Simd::fence();
  }

  // Finalize: each output column sums its chunks in chunk order (deterministic).
  auto finalize = [&](const float* part_slot, int64_t g0, int64_t nchunks, auto* out) {
    using TO = std::remove_pointer_t<decltype(out)>;
    std::vector<float> s(static_cast<size_t>(D), 0.f);
    for (int64_t k = g0; k < g0 + nchunks; ++k) {
      const float* row = part_slot + k * D;
      for (int64_t j = 0; j < D; ++j) s[j] += row[j];
    }
    for (int64_t j = 0; j < D; ++j) out[j] = from_float<TO>(s[j]);
  };
  if (!p.per_token) {
#pragma omp parallel for schedule(static) if (p.batch * D > 16384)
    for (int64_t b = 0; b < p.batch; ++b) {
      if (dscale) finalize(ps, b * cps, cps, dscale + b * p.dscale_stride);
      if (dshift) finalize(pt, b * cps, cps, dshift + b * p.dshift_stride);
    }
  }
  if (wb_partials) {
    auto fin_wb = [&](const float* slot, void* out) {
      if (out == nullptr) return;
      if (p.weight_dtype == DType::F32)
        finalize(slot, 0, K, static_cast<float*>(out));
      else if (p.weight_dtype == DType::BF16)
        finalize(slot, 0, K, static_cast<bf16_t*>(out));
      else
        finalize(slot, 0, K, static_cast<f16_t*>(out));
    };
    fin_wb(pw, p.dweight);
    fin_wb(pb, p.dbias);
  }
}

template <typename T>
void run_fwd(const AdalnParams& p) {
  if (p.mod_dtype == DType::F32)
    fwd_impl<T, float>(p);
  else if (p.mod_dtype == DType::BF16)
    fwd_impl<T, bf16_t>(p);
  else
    fwd_impl<T, f16_t>(p);
}
template <typename T>
void run_bwd(const AdalnParams& p) {
  if (p.mod_dtype == DType::F32)
    bwd_impl<T, float>(p);
  else if (p.mod_dtype == DType::BF16)
    bwd_impl<T, bf16_t>(p);
  else
    bwd_impl<T, f16_t>(p);
}

}  // namespace

void adaln_fwd_cpu(const AdalnParams& p) {
  validate(p, AdalnPass::Fwd);
  if (p.rows == 0) return;
  if (p.x_dtype == DType::F32)
    run_fwd<float>(p);
  else if (p.x_dtype == DType::BF16)
    run_fwd<bf16_t>(p);
  else
    run_fwd<f16_t>(p);
}

void adaln_bwd_cpu(const AdalnParams& p) {
  validate(p, AdalnPass::Bwd);
  if (p.x_dtype == DType::F32)
    run_bwd<float>(p);
  else if (p.x_dtype == DType::BF16)
    run_bwd<bf16_t>(p);
  else
    run_bwd<f16_t>(p);
}

}  // namespace adaptiveload
