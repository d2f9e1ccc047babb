// Test support for the adaLN kernels: see adaln_check.h.
#include "adaptiveload/kernels/adaln_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "adaptiveload/kernels/half_types.h"

namespace adaptiveload {
namespace adaln_check {
namespace {

double round_to(DType t, double v) {
  const float f = static_cast<float>(v);
  switch (t) {
    case DType::F32:
      return f;
    case DType::BF16:
      return bf16_to_float(float_to_bf16(f));
    case DType::F16:
      return f16_to_float(float_to_f16(f));
    case DType::F64:
      return v;
  }
  return f;
}

// PyTorch type promotion of a binary op between dtypes a and b.
DType promote(DType a, DType b) { return a == b ? a : DType::F32; }

uint64_t mix(uint64_t z) {  // splitmix64 finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double unit(uint64_t h) { return double(h >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)

// max |a - b| over two same-shape buffers; a NaN on one side only counts as infinite.
double max_err(const Buffer& a, const Buffer& b) {
  double e = 0;
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t c = 0; c < a.cols; ++c) {
      const double x = a.get(r, c), y = b.get(r, c);
      if (std::isnan(x) || std::isnan(y)) {
        if (std::isnan(x) != std::isnan(y)) return std::numeric_limits<double>::infinity();
        continue;
      }
      if (std::isinf(x) || std::isinf(y)) {
        if (x != y) return std::numeric_limits<double>::infinity();
        continue;
      }
      e = std::max(e, std::fabs(x - y));
    }
  return e;
}

double max_abs(const Buffer& a) {
  double m = 0;
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t c = 0; c < a.cols; ++c) {
      const double v = std::fabs(a.get(r, c));
      if (std::isfinite(v)) m = std::max(m, v);
    }
  return m;
}

void compare(AdalnCheck& out, const char* name, const Buffer& got, const Buffer& unfused,
             const Buffer& truth) {
  const double ek = max_err(got, truth), eu = max_err(unfused, truth);
  const double atol = atol_fraction(got.dtype) * std::max(1.0, max_abs(truth));
  const bool ok = ek <= 2 * eu + atol;
  char line[256];
  std::snprintf(line, sizeof line, "%-8s %-4s kernel_err %.3e unfused_err %.3e atol %.2e %s\n",
                name, dtype_name(got.dtype), ek, eu, atol, ok ? "ok" : "FAIL");
  out.report += line;
  out.ok = out.ok && ok;
}

// Fixed-tolerance comparison for the fp32 statistics (no unfused analogue: eager computes
// them in fp32 too).
void compare_stats(AdalnCheck& out, const Buffer& mean, const Buffer& rstd, const Buffer& tmean,
                   const Buffer& trstd, double x_scale) {
  double em = 0, er = 0;
  bool ok = true;
  for (int64_t r = 0; r < mean.rows; ++r) {
    const double dm = std::fabs(mean.get(r, 0) - tmean.get(r, 0));
    const double dr = std::fabs(rstd.get(r, 0) - trstd.get(r, 0)) / std::fabs(trstd.get(r, 0));
    if (!(dm <= 1e-5 * x_scale) || !(dr <= 1e-4)) ok = false;
    if (std::isfinite(dm)) em = std::max(em, dm);
    if (std::isfinite(dr)) er = std::max(er, dr);
  }
  char line[160];
  std::snprintf(line, sizeof line, "mean/rstd f32  abs_err %.3e rel_err %.3e %s\n", em, er,
                ok ? "ok" : "FAIL");
  out.report += line;
  out.ok = out.ok && ok;
}

// fp32 copies of every input of p and fresh fp32 outputs: the reference run on these is
// the truth (fp64 math, one rounding to fp32). For segments: fp64 copies, the modulation
// expanded to one row per row of x (per-token), so that the truth does not take the
// segment path of the reference; segment_sums() then adds dscale / dshift over each
// segment's rows.
struct TruthProblem {
  Buffer x, scale, shift, weight, bias, y, mean, rstd, dy, dx, dscale, dshift, dweight, dbias;
  AdalnParams q;
  explicit TruthProblem(const AdalnProblem& pr) {
    const AdalnCase& c = pr.c;
    const bool seg = !c.segments.empty();
    const DType td = seg ? DType::F64 : DType::F32;
    const int64_t N = c.rows();
    x = pr.x.as(td);
    scale = seg ? per_row(pr.scale, c, td) : pr.scale.as(td);
    shift = seg ? per_row(pr.shift, c, td) : pr.shift.as(td);
    weight = pr.weight.as(td);
    bias = pr.bias.as(td);
    dy = pr.dy.as(td);
    mean = pr.mean.as(td);
    rstd = pr.rstd.as(td);
    y = Buffer(td, pr.y.rows, c.D);
    dx = Buffer(td, pr.dx.rows, c.D);
    dscale = Buffer(td, scale.rows, c.D);
    dshift = Buffer(td, shift.rows, c.D);
    dweight = Buffer(td, 1, c.D);
    dbias = Buffer(td, 1, c.D);
    q.rows = N;
    q.dim = c.D;
    q.batch = seg ? N : c.batch;
    q.rows_per_sample = seg ? 1 : c.L;
    q.per_token = seg || c.per_token;
    q.eps = c.eps;
    q.x_dtype = q.mod_dtype = q.weight_dtype = td;
    q.x = x.data();
    q.scale = scale.data();
    q.shift = shift.data();
    q.weight = c.weight ? weight.data() : nullptr;
    q.bias = c.bias ? bias.data() : nullptr;
    q.y = y.data();
    if (seg) {
      q.mean_f64 = static_cast<double*>(mean.data());
      q.rstd_f64 = static_cast<double*>(rstd.data());
    } else {
      q.mean = static_cast<float*>(mean.data());
      q.rstd = static_cast<float*>(rstd.data());
    }
    q.dy = dy.data();
    q.dx = dx.data();
    q.dscale = dscale.data();
    q.dshift = dshift.data();
    q.dweight = c.weight ? dweight.data() : nullptr;
    q.dbias = c.bias ? dbias.data() : nullptr;
    adaln_set_contiguous_strides(q);
  }
  // [rows, D]: row r is b's row of r's segment (c.mod_row_of), in dtype t.
  static Buffer per_row(const Buffer& b, const AdalnCase& c, DType t) {
    Buffer out(t, c.rows(), b.cols);
    const std::vector<int64_t> m = c.mod_row_of();
    for (int64_t r = 0; r < out.rows; ++r)
      for (int64_t j = 0; j < b.cols; ++j) out.set(r, j, b.get(m[size_t(r)], j));
    return out;
  }
  // A per-row [rows, D] truth summed over each segment's rows: [segments, D] (0 when empty).
  static Buffer segment_sums(const Buffer& b, const AdalnCase& c) {
    Buffer out(b.dtype, c.mod_rows(), b.cols);
    const std::vector<int64_t> m = c.mod_row_of();
    for (int64_t r = 0; r < b.rows; ++r)
      for (int64_t j = 0; j < b.cols; ++j)
        out.set(m[size_t(r)], j, out.get(m[size_t(r)], j) + b.get(r, j));
    return out;
  }
};

double w_at(const AdalnProblem& pr, int64_t j) { return pr.c.weight ? pr.weight.get(0, j) : 1.0; }
double b_at(const AdalnProblem& pr, int64_t j) { return pr.c.bias ? pr.bias.get(0, j) : 0.0; }

// Eager-PyTorch forward in the problem's dtypes: ln = round_T(layer_norm), then
// round_R(ln * round_TM(1 + s)), round_R(+ t), then .to(T).
Buffer unfused_fwd(const AdalnProblem& pr) {
  const AdalnCase& c = pr.c;
  const DType T = c.x_dtype, TM = c.mod_dtype, R = promote(T, TM);
  const int64_t N = c.rows(), D = c.D;
  const std::vector<int64_t> mrow = c.mod_row_of();
  Buffer y(T, N, D);
  for (int64_t r = 0; r < N; ++r) {
    double s = 0, ss = 0;
    for (int64_t j = 0; j < D; ++j) s += pr.x.get(r, j);
    const double mean = s / double(D);
    for (int64_t j = 0; j < D; ++j) ss += (pr.x.get(r, j) - mean) * (pr.x.get(r, j) - mean);
    const double rstd = 1.0 / std::sqrt(ss / double(D) + c.eps);
    const int64_t m = mrow[size_t(r)];
    for (int64_t j = 0; j < D; ++j) {
      const double ln = round_to(T, (pr.x.get(r, j) - mean) * rstd * w_at(pr, j) + b_at(pr, j));
      const double s1 = round_to(TM, 1.0 + pr.scale.get(m, j));
      const double prod = round_to(R, ln * s1);
      y.set(r, j, round_to(R, prod + pr.shift.get(m, j)));
    }
  }
  return y;
}

struct Grads {
  Buffer dx, dscale, dshift, dweight, dbias;
};

// Eager-PyTorch backward of the graph above, with the saved mean / rstd of pr.
Grads unfused_bwd(const AdalnProblem& pr) {
  const AdalnCase& c = pr.c;
  const DType T = c.x_dtype, TM = c.mod_dtype, R = promote(T, TM), TW = c.weight_dtype;
  const int64_t N = c.rows(), D = c.D, mod_rows = c.mod_rows();
  const std::vector<int64_t> mrow = c.mod_row_of();
  Grads g{Buffer(T, N, D), Buffer(TM, mod_rows, D), Buffer(TM, mod_rows, D), Buffer(TW, 1, D),
          Buffer(TW, 1, D)};
  std::vector<double> ds(size_t(mod_rows * D), 0.0), dt(ds.size(), 0.0),
      dw(static_cast<size_t>(D), 0.0), db(static_cast<size_t>(D), 0.0);
  std::vector<double> xh(static_cast<size_t>(D)), dxh(static_cast<size_t>(D));
  for (int64_t r = 0; r < N; ++r) {
    const double mean = pr.mean.get(r, 0), rstd = pr.rstd.get(r, 0);
    const int64_t m = mrow[size_t(r)];
    double s1sum = 0, s2sum = 0;
    for (int64_t j = 0; j < D; ++j) {
      xh[j] = (pr.x.get(r, j) - mean) * rstd;
      const double ln = round_to(T, xh[j] * w_at(pr, j) + b_at(pr, j));
      const double gy = pr.dy.get(r, j);
      const double s1 = round_to(TM, 1.0 + pr.scale.get(m, j));
      ds[m * D + j] += round_to(R, gy * ln);
      dt[m * D + j] += gy;
      const double dln = round_to(T, round_to(R, gy * s1));
      dw[j] += dln * xh[j];
      db[j] += dln;
      dxh[j] = dln * w_at(pr, j);
      s1sum += dxh[j];
      s2sum += dxh[j] * xh[j];
    }
    const double c1 = s1sum / double(D), c2 = s2sum / double(D);
    for (int64_t j = 0; j < D; ++j) g.dx.set(r, j, rstd * (dxh[j] - c1 - xh[j] * c2));
  }
  for (int64_t m = 0; m < mod_rows; ++m)
    for (int64_t j = 0; j < D; ++j) {
      g.dscale.set(m, j, round_to(R, ds[m * D + j]));
      g.dshift.set(m, j, round_to(R, dt[m * D + j]));
    }
  for (int64_t j = 0; j < D; ++j) {
    g.dweight.set(0, j, dw[j]);
    g.dbias.set(0, j, db[j]);
  }
  return g;
}

Buffer dense(const Buffer& b) { return b.as(b.dtype); }

}  // namespace

Buffer::Buffer(DType t, int64_t r, int64_t c, int64_t s)
    : dtype(t),
      rows(r),
      cols(c),
      stride(s < 0 ? c : s),
      bytes(size_t(r * (s < 0 ? c : s)) * dtype_size(t)) {}

double Buffer::get(int64_t r, int64_t c) const {
  const int64_t i = r * stride + c;
  switch (dtype) {
    case DType::F32:
      return reinterpret_cast<const float*>(bytes.data())[i];
    case DType::BF16:
      return bf16_to_float(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
    case DType::F16:
      return f16_to_float(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
    case DType::F64:
      return reinterpret_cast<const double*>(bytes.data())[i];
  }
  return 0;
}

void Buffer::set(int64_t r, int64_t c, double v) {
  const int64_t i = r * stride + c;
  const float f = static_cast<float>(v);
  switch (dtype) {
    case DType::F32:
      reinterpret_cast<float*>(bytes.data())[i] = f;
      break;
    case DType::BF16:
      reinterpret_cast<uint16_t*>(bytes.data())[i] = float_to_bf16(f);
      break;
    case DType::F16:
      reinterpret_cast<uint16_t*>(bytes.data())[i] = float_to_f16(f);
      break;
    case DType::F64:
      reinterpret_cast<double*>(bytes.data())[i] = v;
      break;
  }
}

Buffer Buffer::as(DType t) const {
  Buffer out(t, rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out.set(r, c, get(r, c));
  return out;
}

void fill_uniform(Buffer& b, uint64_t seed, double lo, double hi) {
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t c = 0; c < b.cols; ++c)
      b.set(r, c,
            lo + (hi - lo) * unit(mix(seed * 0x100000001b3ull ^
                                      mix(uint64_t(r) * 0x9e37ull + uint64_t(c)))));
}

double atol_fraction(DType t) {
  switch (t) {
    case DType::F32:
      return 1e-5;
    case DType::BF16:
      return 1.0 / 1024;
    case DType::F16:
      return 1.0 / 8192;
    case DType::F64:
      return 1e-12;
  }
  return 0;
}

std::string AdalnCase::name() const {
  char s[200];
  if (!segments.empty()) {  // the segment count, the total and the longest
    const int64_t longest = *std::max_element(segments.begin(), segments.end());
    std::snprintf(s, sizeof s, "seg%zu_N%lld_max%lld_%s_D%lld_x%s_m%s%s%s_pad%lld", segments.size(),
                  (long long)rows(), (long long)longest, seg_i64 ? "i64" : "i32", (long long)D,
                  dtype_name(x_dtype), dtype_name(mod_dtype), weight ? "_w" : "", bias ? "_b" : "",
                  (long long)pad);
    return s;
  }
  std::snprintf(s, sizeof s, "B%lld_L%lld_D%lld_%s_x%s_m%s%s%s_pad%lld", (long long)batch,
                (long long)L, (long long)D, per_token ? "tok" : "smp", dtype_name(x_dtype),
                dtype_name(mod_dtype), weight ? "_w" : "", bias ? "_b" : "", (long long)pad);
  return s;
}

int64_t AdalnCase::rows() const {
  if (segments.empty()) return batch * L;
  int64_t n = 0;
  for (int64_t len : segments) n += len;
  return n;
}

int64_t AdalnCase::mod_rows() const {
  if (!segments.empty()) return int64_t(segments.size());
  return per_token ? batch * L : batch;
}

std::vector<int64_t> AdalnCase::mod_row_of() const {
  std::vector<int64_t> m;
  m.reserve(size_t(rows()));
  if (segments.empty()) {
    for (int64_t r = 0; r < batch * L; ++r) m.push_back(per_token ? r : r / L);
    return m;
  }
  for (size_t s = 0; s < segments.size(); ++s) m.insert(m.end(), size_t(segments[s]), int64_t(s));
  return m;
}

AdalnProblem::AdalnProblem(const AdalnCase& cs) : c(cs) {
  const int64_t N = c.rows(), D = c.D, S = D + c.pad, mod_rows = c.mod_rows();
  if (!c.segments.empty()) {
    int64_t at = 0;
    cu64.push_back(0);
    for (int64_t len : c.segments) cu64.push_back(at += len);
    if (!c.seg_i64) cu32.assign(cu64.begin(), cu64.end());
    if (!c.seg_i64) cu64.clear();
  }
  x = Buffer(c.x_dtype, N, D, S);
  fill_uniform(x, c.seed * 16 + 1, -1, 1);
  Buffer off(DType::F32, N, 1);
  fill_uniform(off, c.seed * 16 + 2, -c.x_offset, c.x_offset);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t j = 0; j < D; ++j) x.set(r, j, x.get(r, j) + off.get(r, 0));
  scale = Buffer(c.mod_dtype, mod_rows, D, S);
  fill_uniform(scale, c.seed * 16 + 3, -0.5, 0.5);
  shift = Buffer(c.mod_dtype, mod_rows, D, S);
  fill_uniform(shift, c.seed * 16 + 4, -0.5, 0.5);
  weight = Buffer(c.weight_dtype, 1, D);
  fill_uniform(weight, c.seed * 16 + 5, 0.5, 1.5);
  bias = Buffer(c.weight_dtype, 1, D);
  fill_uniform(bias, c.seed * 16 + 6, -0.5, 0.5);
  dy = Buffer(c.x_dtype, N, D, S);
  fill_uniform(dy, c.seed * 16 + 7, -1, 1);
  // Outputs start as NaN so that an element the kernel forgets to write fails the check.
  auto nan_buffer = [](DType t, int64_t r, int64_t cols, int64_t s) {
    Buffer b(t, r, cols, s);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < cols; ++j) b.set(i, j, std::numeric_limits<double>::quiet_NaN());
    return b;
  };
  y = nan_buffer(c.x_dtype, N, D, S);
  mean = nan_buffer(DType::F32, N, 1, 1);
  rstd = nan_buffer(DType::F32, N, 1, 1);
  dx = nan_buffer(c.x_dtype, N, D, S);
  dscale = nan_buffer(c.mod_dtype, mod_rows, D, S);
  dshift = nan_buffer(c.mod_dtype, mod_rows, D, S);
  dweight = nan_buffer(c.weight_dtype, 1, D, D);
  dbias = nan_buffer(c.weight_dtype, 1, D, D);
}

AdalnParams AdalnCase::shape_params() const {
  AdalnParams p;
  p.rows = rows();
  p.dim = D;
  p.batch = segments.empty() ? batch : int64_t(segments.size());
  p.rows_per_sample = segments.empty() ? L : 0;
  p.per_token = per_token && segments.empty();
  p.cu_seqlens_i64 = seg_i64;
  p.eps = eps;
  p.x_dtype = x_dtype;
  p.mod_dtype = mod_dtype;
  p.weight_dtype = weight_dtype;
  return p;
}

AdalnParams AdalnProblem::params() {
  AdalnParams p = c.shape_params();
  p.x = x.data();
  p.x_stride = x.stride;
  p.scale = scale.data();
  p.scale_stride = scale.stride;
  p.shift = shift.data();
  p.shift_stride = shift.stride;
  p.weight = c.weight ? weight.data() : nullptr;
  p.bias = c.bias ? bias.data() : nullptr;
  p.y = y.data();
  p.y_stride = y.stride;
  p.mean = static_cast<float*>(mean.data());
  p.rstd = static_cast<float*>(rstd.data());
  p.dy = dy.data();
  p.dy_stride = dy.stride;
  p.dx = dx.data();
  p.dx_stride = dx.stride;
  p.dscale = dscale.data();
  p.dscale_stride = dscale.stride;
  p.dshift = dshift.data();
  p.dshift_stride = dshift.stride;
  p.dweight = c.weight ? dweight.data() : nullptr;
  p.dbias = c.bias ? dbias.data() : nullptr;
  if (!c.segments.empty())
    p.cu_seqlens = c.seg_i64 ? static_cast<const void*>(cu64.data()) : cu32.data();
  return p;
}

AdalnCheck check_adaln_fwd(const AdalnCase& c, const AdalnKernel& kernel) {
  AdalnProblem pr(c);
  kernel(pr.params());
  TruthProblem t(pr);
  adaln_fwd_ref(t.q);
  const Buffer uy = unfused_fwd(pr);
  AdalnCheck out;
  compare(out, "y", dense(pr.y), uy, t.y);
  compare_stats(out, pr.mean, pr.rstd, t.mean, t.rstd, 1.0 + c.x_offset);
  return out;
}

AdalnCheck check_adaln_bwd(const AdalnCase& c, const AdalnKernel& kernel) {
  AdalnProblem pr(c);
  adaln_fwd_ref(pr.params());  // saved mean / rstd, as the forward leaves them
  kernel(pr.params());
  TruthProblem t(pr);
  adaln_bwd_ref(t.q);
  const Grads u = unfused_bwd(pr);
  const bool seg = !c.segments.empty();
  const Buffer tds = seg ? TruthProblem::segment_sums(t.dscale, c) : t.dscale;
  const Buffer tdt = seg ? TruthProblem::segment_sums(t.dshift, c) : t.dshift;
  AdalnCheck out;
  compare(out, "dx", dense(pr.dx), u.dx, t.dx);
  compare(out, "dscale", dense(pr.dscale), u.dscale, tds);
  compare(out, "dshift", dense(pr.dshift), u.dshift, tdt);
  if (c.weight) compare(out, "dweight", pr.dweight, u.dweight, t.dweight);
  if (c.bias) compare(out, "dbias", pr.dbias, u.dbias, t.dbias);
  return out;
}

std::vector<AdalnCase> dtype_combos(bool with_per_token, bool distinct) {
  std::vector<AdalnCase> out;
  for (DType xt : {DType::F32, DType::BF16, DType::F16})
    for (bool mod_f32 : {true, false})
      for (bool per_token : {false, true})
        for (int affine : {0, 1}) {
          if ((per_token && !with_per_token) || (distinct && xt == DType::F32 && !mod_f32))
            continue;
          AdalnCase c;
          c.x_dtype = xt;
          c.mod_dtype = mod_f32 ? DType::F32 : xt;
          c.weight_dtype = (affine && !mod_f32) ? xt : DType::F32;
          c.per_token = per_token;
          c.weight = c.bias = affine != 0;
          out.push_back(c);
        }
  return out;
}

}  // namespace adaln_check
}  // namespace adaptiveload
