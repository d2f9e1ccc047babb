// F64 storage: the reference computes and stores it (for float64 gradcheck through the
// Python op), saving fp64 mean / rstd so that its backward is fp64 accurate too; the fast
// CPU paths refuse it by name instead of misreading the bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {
namespace {

AdalnParams f64_params(std::vector<double>& x, std::vector<double>& mod, std::vector<double>& y,
                       std::vector<double>& mean, std::vector<double>& rstd) {
  AdalnParams p;
  p.rows = 2, p.dim = 3, p.batch = 1, p.rows_per_sample = 2;
  p.x_dtype = p.mod_dtype = p.weight_dtype = DType::F64;
  adaln_set_contiguous_strides(p);
  p.x = x.data(), p.scale = mod.data(), p.shift = mod.data(), p.y = y.data();
  p.mean_f64 = mean.data(), p.rstd_f64 = rstd.data();
  return p;
}

TEST(AdalnF64, ReferenceStoresFp64) {
  std::vector<double> x = {1.0, 2.0, 4.0, -1.0, 0.5, 1e-9}, mod = {0.25, -0.5, 0.125}, y(6);
  std::vector<double> mean(2), rstd(2);
  const AdalnParams p = f64_params(x, mod, y, mean, rstd);
  adaln_fwd_ref(p);
  for (int r = 0; r < 2; ++r) {
    double m = 0, v = 0;
    for (int j = 0; j < 3; ++j) m += x[r * 3 + j] / 3;
    for (int j = 0; j < 3; ++j) v += (x[r * 3 + j] - m) * (x[r * 3 + j] - m) / 3;
    for (int j = 0; j < 3; ++j) {
      const double want = (x[r * 3 + j] - m) / std::sqrt(v + double(p.eps)) * (1 + mod[j]) + mod[j];
      EXPECT_NEAR(y[r * 3 + j], want, 1e-14) << "row " << r << " col " << j;
    }
  }
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_STREQ(dtype_name(DType::F64), "f64");
  EXPECT_EQ(adaln_stats_dtype(DType::F64), DType::F64);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) EXPECT_EQ(adaln_stats_dtype(t), DType::F32);
}

TEST(AdalnF64, FastPathsRefuseItNamingTheReference) {
  std::vector<double> x(6, 1.0), mod(3, 0.0), y(6), mean(2), rstd(2);
  const AdalnParams p = f64_params(x, mod, y, mean, rstd);
  try {
    adaln_fwd_cpu(p);
    FAIL() << "adaln_fwd_cpu accepted F64 storage";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("reference"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate(p, AdalnPass::Fwd), std::invalid_argument);
  EXPECT_NO_THROW(validate_reference(p, AdalnPass::Fwd));
}

// F64 x saves its statistics in mean_f64 / rstd_f64; the fp32 pair does not stand in.
TEST(AdalnF64, StatisticsPointersFollowXsDtype) {
  std::vector<double> x(6, 1.0), mod(3, 0.0), y(6), mean(2), rstd(2);
  std::vector<float> mean32(2), rstd32(2);
  AdalnParams p = f64_params(x, mod, y, mean, rstd);
  p.mean_f64 = p.rstd_f64 = nullptr;
  p.mean = mean32.data(), p.rstd = rstd32.data();
  for (AdalnPass pass : {AdalnPass::Fwd, AdalnPass::Bwd}) {
    try {
      validate_reference(p, pass);
      FAIL() << "F64 x accepted fp32 mean / rstd";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("AdalnParams.mean_f64 is null"), std::string::npos)
          << e.what();
    }
  }
  // fp32 x (here with an F64 weight, which the reference also takes) keeps fp32 statistics.
  std::vector<float> x32(6, 1.0f), mod32(3, 0.0f), y32(6);
  AdalnParams q = p;
  q.x_dtype = q.mod_dtype = DType::F32;
  q.x = x32.data(), q.scale = q.shift = mod32.data(), q.y = y32.data();
  EXPECT_NO_THROW(validate_reference(q, AdalnPass::Fwd));
  q.mean = nullptr;
  EXPECT_THROW(validate_reference(q, AdalnPass::Fwd), std::invalid_argument);
}

// --- fp64 forward statistics and backward against a long-double reference -------------

// [n] values stored as t (F64, or F32 for a float32 modulation of F64 x), read as double.
struct Vec {
  DType t;
  std::vector<double> d;
  std::vector<float> f;
  Vec(DType type, size_t n)
      : t(type), d(type == DType::F64 ? n : 0), f(type == DType::F32 ? n : 0) {}
  void* data() { return t == DType::F64 ? static_cast<void*>(d.data()) : f.data(); }
  double get(size_t i) const { return t == DType::F64 ? d[i] : double(f[i]); }
  void set(size_t i, double v) {
    if (t == DType::F64)
      d[i] = v;
    else
      f[i] = float(v);
  }
};

struct F64Case {
  int64_t B, L, D;
  bool per_token, affine;
  DType mod_dtype;
};

std::string case_name(const F64Case& c) {
  return "D" + std::to_string(c.D) + (c.per_token ? "_tok" : "_smp") + (c.affine ? "_wb" : "") +
         (c.mod_dtype == DType::F32 ? "_mf32" : "");
}
void PrintTo(const F64Case& c, std::ostream* os) { *os << "B2_L3_" << case_name(c); }

// Inputs in [-1, 1) from a fixed LCG (the same on every platform), x offset by 3 so that the
// mean is not zero.
struct F64Problem {
  F64Case c;
  int64_t N, M;
  Vec x, scale, shift, w, b, dy, y, dx, dscale, dshift, dw, db;
  std::vector<double> mean, rstd;
  AdalnParams p;

  explicit F64Problem(const F64Case& cs)
      : c(cs),
        N(cs.B * cs.L),
        M(cs.per_token ? N : cs.B),
        x(DType::F64, size_t(N * cs.D)),
        scale(cs.mod_dtype, size_t(M * cs.D)),
        shift(cs.mod_dtype, size_t(M * cs.D)),
        w(DType::F64, size_t(cs.D)),
        b(DType::F64, size_t(cs.D)),
        dy(DType::F64, size_t(N * cs.D)),
        y(DType::F64, size_t(N * cs.D)),
        dx(DType::F64, size_t(N * cs.D)),
        dscale(cs.mod_dtype, size_t(M * cs.D)),
        dshift(cs.mod_dtype, size_t(M * cs.D)),
        dw(DType::F64, size_t(cs.D)),
        db(DType::F64, size_t(cs.D)),
        mean(size_t(N)),
        rstd(size_t(N)) {
    uint64_t s = 0x9e3779b97f4a7c15ull ^ uint64_t(c.D * 131 + c.L * 7 + c.per_token);
    const auto u = [&] {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      return double(s >> 11) * 0x1p-52 - 1.0;
    };
    const auto fill = [&](Vec& v, double off, double amp) {
      for (size_t i = 0; i < v.d.size() + v.f.size(); ++i) v.set(i, off + amp * u());
    };
    fill(x, 3.0, 2.0), fill(scale, 0.0, 0.5), fill(shift, 0.0, 0.5);
    fill(w, 1.0, 0.3), fill(b, 0.0, 0.2), fill(dy, 0.0, 1.0);
    p.rows = N, p.dim = c.D, p.batch = c.B, p.rows_per_sample = c.L, p.per_token = c.per_token;
    p.x_dtype = p.weight_dtype = DType::F64;
    p.mod_dtype = c.mod_dtype;
    adaln_set_contiguous_strides(p);
    p.x = x.data(), p.scale = scale.data(), p.shift = shift.data();
    p.weight = c.affine ? w.data() : nullptr, p.bias = c.affine ? b.data() : nullptr;
    p.y = y.data(), p.mean_f64 = mean.data(), p.rstd_f64 = rstd.data();
    p.dy = dy.data(), p.dx = dx.data(), p.dscale = dscale.data(), p.dshift = dshift.data();
    p.dweight = c.affine ? dw.data() : nullptr, p.dbias = c.affine ? db.data() : nullptr;
  }
};

using LD = long double;

// The adaLN forward and backward of pr's inputs in long double, from x alone (not from any
// saved statistics): the truth for the fp64 reference's fp64 outputs.
struct LdTruth {
  std::vector<LD> mean, rstd, y, dx, dscale, dshift, dw, db;
  // Largest rstd * (|dxhat| + |mean(dxhat)| + |xhat mean(dxhat xhat)|): the size of the terms
  // dx cancels. dx itself can be far smaller (at D = 2 it is O(eps / var) of them), so its
  // fp64 rounding is measured against these.
  LD dx_terms = 0;
  explicit LdTruth(const F64Problem& pr) {
    const F64Case& c = pr.c;
    const int64_t N = pr.N, D = c.D;
    mean.assign(size_t(N), 0), rstd.assign(size_t(N), 0), y.assign(size_t(N * D), 0);
    dx.assign(size_t(N * D), 0), dscale.assign(size_t(pr.M * D), 0);
    dshift.assign(size_t(pr.M * D), 0), dw.assign(size_t(D), 0), db.assign(size_t(D), 0);
    std::vector<LD> xh(static_cast<size_t>(D)), dxh(static_cast<size_t>(D));
    for (int64_t r = 0; r < N; ++r) {
      LD m = 0, v = 0;
      for (int64_t j = 0; j < D; ++j) m += pr.x.get(size_t(r * D + j));
      m /= LD(D);
      for (int64_t j = 0; j < D; ++j)
        v += (pr.x.get(size_t(r * D + j)) - m) * (pr.x.get(size_t(r * D + j)) - m);
      const LD rs = 1 / std::sqrt(v / LD(D) + LD(pr.p.eps));
      mean[size_t(r)] = m, rstd[size_t(r)] = rs;
      const int64_t mr = c.per_token ? r : r / c.L;
      LD c1 = 0, c2 = 0;
      for (int64_t j = 0; j < D; ++j) {
        const size_t i = size_t(r * D + j), k = size_t(mr * D + j);
        const LD wj = c.affine ? LD(pr.w.get(size_t(j))) : 1,
                 bj = c.affine ? LD(pr.b.get(size_t(j))) : 0;
        xh[size_t(j)] = (pr.x.get(i) - m) * rs;
        const LD n = xh[size_t(j)] * wj + bj, s = pr.scale.get(k), g = pr.dy.get(i);
        y[i] = n * (1 + s) + LD(pr.shift.get(k));
        const LD dn = g * (1 + s);
        dxh[size_t(j)] = dn * wj;
        c1 += dxh[size_t(j)], c2 += dxh[size_t(j)] * xh[size_t(j)];
        dscale[k] += g * n, dshift[k] += g;
        dw[size_t(j)] += dn * xh[size_t(j)], db[size_t(j)] += dn;
      }
      c1 /= LD(D), c2 /= LD(D);
      for (int64_t j = 0; j < D; ++j) {
        dx[size_t(r * D + j)] = rs * (dxh[size_t(j)] - c1 - xh[size_t(j)] * c2);
        const LD terms = std::fabs(dxh[size_t(j)]) + std::fabs(c1) + std::fabs(xh[size_t(j)] * c2);
        dx_terms = std::max(dx_terms, rs * terms);
      }
    }
  }
};

// max |got - want| / scale, scale = max |want| unless given (the absolute error when the scale
// is 0, e.g. dx at D = 1, where it must be exactly 0).
double rel_err(const std::vector<double>& got, const std::vector<LD>& want, LD scale = -1) {
  LD err = 0, top = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(LD(got[i]) - want[i]));
    top = std::max(top, std::fabs(want[i]));
  }
  if (scale < 0) scale = top;
  return double(scale > 0 ? err / scale : err);
}

double rel_err(const Vec& got, const std::vector<LD>& want, LD scale = -1) {
  std::vector<double> g(want.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = got.get(i);
  return rel_err(g, want, scale);
}

class AdalnF64Accuracy : public ::testing::TestWithParam<F64Case> {};

// fp64 in, fp64 out: the forward's mean / rstd and y, and the backward from those saved
// statistics, each within 1e-12 (relative to the tensor's largest value) of the long-double
// truth (dx: of the terms it cancels). fp32 statistics (as all dtypes once saved) left dscale
// 4e-5 - 6e-4 off at D = 1 (x - mean no longer 0) and every gradient 2e-8 - 1e-7 off at
// D = 8 and 1023.
TEST_P(AdalnF64Accuracy, ForwardStatsAndBackwardWithinFp64OfLongDouble) {
  F64Problem pr(GetParam());
  adaln_fwd_ref(pr.p);
  adaln_bwd_ref(pr.p);
  const LdTruth t(pr);
  constexpr double kTol = 1e-12;
  EXPECT_LE(rel_err(pr.mean, t.mean), kTol) << "mean";
  EXPECT_LE(rel_err(pr.rstd, t.rstd), kTol) << "rstd";
  EXPECT_LE(rel_err(pr.y, t.y), kTol) << "y";
  EXPECT_LE(rel_err(pr.dx, t.dx, t.dx_terms), kTol) << "dx";
  // A float32 modulation's gradients are rounded to float32.
  const double tol_mod = pr.c.mod_dtype == DType::F64 ? kTol : 1e-7;
  EXPECT_LE(rel_err(pr.dscale, t.dscale), tol_mod) << "dscale";
  EXPECT_LE(rel_err(pr.dshift, t.dshift), tol_mod) << "dshift";
  if (pr.c.affine) {
    EXPECT_LE(rel_err(pr.dw, t.dw), kTol) << "dweight";
    EXPECT_LE(rel_err(pr.db, t.db), kTol) << "dbias";
  }
}

std::vector<F64Case> f64_cases() {
  std::vector<F64Case> out;
  for (int64_t D : {1, 2, 8, 1023})
    for (bool per_token : {false, true})
      for (bool affine : {false, true}) out.push_back({2, 3, D, per_token, affine, DType::F64});
  out.push_back({2, 3, 8, false, true, DType::F32});  // float32 modulation of float64 x
  return out;
}

INSTANTIATE_TEST_SUITE_P(Adaln, AdalnF64Accuracy, ::testing::ValuesIn(f64_cases()),
                         [](const ::testing::TestParamInfo<F64Case>& i) {
                           return case_name(i.param);
                         });

}  // namespace
}  // namespace adaptiveload
