// CPU reference of the fused adaLN forward and backward: plain loops, fp64 arithmetic.
// This is the ground truth the CPU fast path and the CUDA kernels are tested against; it
// favours obviousness over speed (one element at a time, dtype switch per access).
#include <cmath>
#include <vector>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/half_types.h"

namespace adaptiveload {
namespace {

double ld(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(p)[i];
    case DType::BF16:
      return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::F16:
      return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::F64:
      return static_cast<const double*>(p)[i];
  }
  return 0.0;
}

void st(void* p, DType t, int64_t i, double v) {
  if (t == DType::F64) {
    static_cast<double*>(p)[i] = v;
    return;
  }
  const float f = static_cast<float>(v);
  switch (t) {
    case DType::F64:
      break;  // stored above
    case DType::F32:
      static_cast<float*>(p)[i] = f;
      break;
    case DType::BF16:
      static_cast<uint16_t*>(p)[i] = float_to_bf16(f);
      break;
    case DType::F16:
      static_cast<uint16_t*>(p)[i] = float_to_f16(f);
      break;
  }
}

// The saved statistics of row r, in adaln_stats_dtype(x_dtype): fp64 for F64 x, else fp32
// (rounded once from the fp64 values, as the fast paths save them).
void store_stats(const AdalnParams& p, int64_t r, double mean, double rstd) {
  if (adaln_stats_dtype(p.x_dtype) == DType::F64) {
    p.mean_f64[r] = mean;
    p.rstd_f64[r] = rstd;
  } else {
    p.mean[r] = static_cast<float>(mean);
    p.rstd[r] = static_cast<float>(rstd);
  }
}

void load_stats(const AdalnParams& p, int64_t r, double& mean, double& rstd) {
  const bool f64 = adaln_stats_dtype(p.x_dtype) == DType::F64;
  mean = f64 ? p.mean_f64[r] : p.mean[r];
  rstd = f64 ? p.rstd_f64[r] : p.rstd[r];
}

// Row of the modulation tensor that row r of x uses: its own, its sample's or its segment's.
int64_t mod_row(const AdalnParams& p, int64_t r) {
  if (p.per_token) return r;
  return p.cu_seqlens ? adaln_segment_of(p, r) : r / p.rows_per_sample;
}

}  // namespace

void adaln_fwd_ref(const AdalnParams& p) {
  validate_reference(p, AdalnPass::Fwd);
  validate_segments(p);
  const int64_t D = p.dim;
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t xo = r * p.x_stride;
    double sum = 0;
    for (int64_t j = 0; j < D; ++j) sum += ld(p.x, p.x_dtype, xo + j);
    const double mean = sum / double(D);
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double d = ld(p.x, p.x_dtype, xo + j) - mean;
      ss += d * d;
    }
    const double rstd = 1.0 / std::sqrt(ss / double(D) + double(p.eps));
    const int64_t m = mod_row(p, r);
    for (int64_t j = 0; j < D; ++j) {
      double n = (ld(p.x, p.x_dtype, xo + j) - mean) * rstd;
      if (p.weight) n *= ld(p.weight, p.weight_dtype, j);
      if (p.bias) n += ld(p.bias, p.weight_dtype, j);
      const double s = ld(p.scale, p.mod_dtype, m * p.scale_stride + j);
      const double t = ld(p.shift, p.mod_dtype, m * p.shift_stride + j);
      st(p.y, p.x_dtype, r * p.y_stride + j, n * (1.0 + s) + t);
    }
    store_stats(p, r, mean, rstd);
  }
}

void adaln_bwd_ref(const AdalnParams& p) {
  validate_reference(p, AdalnPass::Bwd);
  validate_segments(p);
  const int64_t D = p.dim;
  const int64_t mod_rows = p.per_token ? p.rows : p.batch;
  // Per-sample (per-segment) sums over rows; per-token rows are written directly.
  std::vector<double> dscale(p.per_token ? 0 : size_t(mod_rows * D), 0.0);
  std::vector<double> dshift(dscale.size(), 0.0);
  std::vector<double> dweight(static_cast<size_t>(D), 0.0), dbias(static_cast<size_t>(D), 0.0);
  std::vector<double> xhat(static_cast<size_t>(D)), dxhat(static_cast<size_t>(D));
  for (int64_t r = 0; r < p.rows; ++r) {
    double mean, rstd;
    load_stats(p, r, mean, rstd);
    const int64_t m = mod_row(p, r);
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double xh = (ld(p.x, p.x_dtype, r * p.x_stride + j) - mean) * rstd;
      const double w = p.weight ? ld(p.weight, p.weight_dtype, j) : 1.0;
      const double b = p.bias ? ld(p.bias, p.weight_dtype, j) : 0.0;
      const double n = xh * w + b;
      const double g = ld(p.dy, p.x_dtype, r * p.dy_stride + j);
      const double s = ld(p.scale, p.mod_dtype, m * p.scale_stride + j);
      const double dn = g * (1.0 + s);
      xhat[j] = xh;
      dxhat[j] = dn * w;
      sum_g += dxhat[j];
      sum_gx += dxhat[j] * xh;
      if (p.per_token) {
        if (p.dscale) st(p.dscale, p.mod_dtype, r * p.dscale_stride + j, g * n);
        if (p.dshift) st(p.dshift, p.mod_dtype, r * p.dshift_stride + j, g);
      } else {
        dscale[m * D + j] += g * n;
        dshift[m * D + j] += g;
      }
      dweight[j] += dn * xh;
      dbias[j] += dn;
    }
    const double c1 = sum_g / double(D), c2 = sum_gx / double(D);
    for (int64_t j = 0; j < D; ++j)
      st(p.dx, p.x_dtype, r * p.dx_stride + j, rstd * (dxhat[j] - c1 - xhat[j] * c2));
  }
  if (!p.per_token) {
    for (int64_t b = 0; b < mod_rows; ++b)
      for (int64_t j = 0; j < D; ++j) {
        if (p.dscale) st(p.dscale, p.mod_dtype, b * p.dscale_stride + j, dscale[b * D + j]);
        if (p.dshift) st(p.dshift, p.mod_dtype, b * p.dshift_stride + j, dshift[b * D + j]);
      }
  }
  for (int64_t j = 0; j < D; ++j) {
    if (p.dweight) st(p.dweight, p.weight_dtype, j, dweight[j]);
    if (p.dbias) st(p.dbias, p.weight_dtype, j, dbias[j]);
  }
}

}  // namespace adaptiveload
