// Fused adaLN: properties beyond the reference comparison — finite differences of the
// backward, NaN / Inf propagation, empty tensors, determinism across thread counts,
// validate() messages, 16-bit conversions, 64-bit offsets.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/adaln_check.h"
#include "adaptiveload/kernels/half_types.h"
#include "adaptiveload/kernels/simd_dispatch_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AL_HW_F16C 1
#else
#define AL_HW_F16C 0
#endif

using namespace adaptiveload;
using adaln_check::AdalnCase;
using adaln_check::AdalnProblem;
using adaln_check::Buffer;

namespace {

// --- finite differences ---------------------------------------------------------------

// loss = sum(y * G) in fp64, with y the adaLN of double inputs (independent of the code
// under test). x: [N, D], s, t: [M, D], w, b: [D].
struct Fd {
  int64_t B, L, D;
  bool per_token;
  std::vector<double> x, s, t, w, b, G;
  double loss() const {
    const int64_t N = B * L;
    double out = 0;
    for (int64_t r = 0; r < N; ++r) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < D; ++j) mean += x[r * D + j];
      mean /= double(D);
      for (int64_t j = 0; j < D; ++j) var += (x[r * D + j] - mean) * (x[r * D + j] - mean);
      const double rstd = 1.0 / std::sqrt(var / double(D) + 1e-6);
      const int64_t m = per_token ? r : r / L;
      for (int64_t j = 0; j < D; ++j) {
        const double n = (x[r * D + j] - mean) * rstd * w[j] + b[j];
        out += (n * (1 + s[m * D + j]) + t[m * D + j]) * G[r * D + j];
      }
    }
    return out;
  }
};

double central_diff(Fd& f, std::vector<double>& v, size_t i) {
  const double h = 1e-4, keep = v[i];
  v[i] = keep + h;
  const double lp = f.loss();
  v[i] = keep - h;
  const double lm = f.loss();
  v[i] = keep;
  return (lp - lm) / (2 * h);
}

void expect_grad(Fd& f, std::vector<double>& v, const Buffer& grad, const char* name) {
  for (size_t i = 0; i < v.size(); ++i) {
    const double fd = central_diff(f, v, i);
    const double an = grad.get(int64_t(i) / grad.cols, int64_t(i) % grad.cols);
    EXPECT_NEAR(an, fd, 2e-4 * (1 + std::fabs(fd))) << name << "[" << i << "]";
  }
}

std::vector<double> to_vec(const Buffer& b) {
  std::vector<double> v;
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t c = 0; c < b.cols; ++c) v.push_back(b.get(r, c));
  return v;
}

void finite_difference_case(bool per_token, int64_t B, int64_t L, int64_t D) {
  AdalnCase c;
  c.batch = B;
  c.L = L;
  c.D = D;
  c.per_token = per_token;
  c.x_dtype = c.mod_dtype = c.weight_dtype = DType::F32;
  c.weight = c.bias = true;
  c.seed = 7;
  AdalnProblem pr(c);
  adaln_fwd_ref(pr.params());
  adaln_bwd_ref(pr.params());
  Fd f{B,
       L,
       D,
       per_token,
       to_vec(pr.x),
       to_vec(pr.scale),
       to_vec(pr.shift),
       to_vec(pr.weight),
       to_vec(pr.bias),
       to_vec(pr.dy)};
  expect_grad(f, f.x, pr.dx, "dx");
  expect_grad(f, f.s, pr.dscale, "dscale");
  expect_grad(f, f.t, pr.dshift, "dshift");
  expect_grad(f, f.w, pr.dweight, "dweight");
  expect_grad(f, f.b, pr.dbias, "dbias");
}

TEST(adaln_finite_diff, PerSample) { finite_difference_case(false, 2, 3, 7); }
TEST(adaln_finite_diff, PerToken) { finite_difference_case(true, 2, 2, 5); }
TEST(adaln_finite_diff, SingleElementRow) { finite_difference_case(false, 1, 3, 1); }

// --- NaN / Inf --------------------------------------------------------------------------

void nan_case(const char* which, double bad, void (*fwd)(const AdalnParams&),
              void (*bwd)(const AdalnParams&)) {
  for (int64_t D : {1, 7, 64, 1500}) {
    AdalnCase c;
    c.batch = 1;
    c.L = 5;
    c.D = D;
    c.x_dtype = DType::BF16;
    AdalnProblem pr(c);
    pr.x.set(2, D / 2, bad);  // row 2 is poisoned
    fwd(pr.params());
    adaln_fwd_ref(pr.params());  // saved stats for the backward: NaN in row 2 as well
    bwd(pr.params());
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t j = 0; j < D; ++j) {
        if (r == 2) {
          EXPECT_TRUE(std::isnan(pr.y.get(r, j))) << which << " D=" << D << " y col " << j;
          EXPECT_TRUE(std::isnan(pr.dx.get(r, j))) << which << " D=" << D << " dx col " << j;
        } else {
          EXPECT_TRUE(std::isfinite(pr.y.get(r, j))) << which << " D=" << D << " row " << r;
          EXPECT_TRUE(std::isfinite(pr.dx.get(r, j))) << which << " D=" << D << " row " << r;
        }
      }
    EXPECT_TRUE(std::isnan(pr.mean.get(2, 0)) || std::isinf(pr.mean.get(2, 0)));
  }
}

TEST(adaln_non_finite, NanInRowGivesNanRowCpu) {
  nan_case("nan", std::nan(""), adaln_fwd_cpu, adaln_bwd_cpu);
}
TEST(adaln_non_finite, InfInRowGivesNanRowCpu) {
  nan_case("inf", std::numeric_limits<double>::infinity(), adaln_fwd_cpu, adaln_bwd_cpu);
}
TEST(adaln_non_finite, NanInRowGivesNanRowRef) {
  nan_case("nan", std::nan(""), adaln_fwd_ref, adaln_bwd_ref);
}

// --- empty tensors ----------------------------------------------------------------------

TEST(adaln_empty, NoRowsDoesNothingAndZeroesReductions) {
  for (auto [B, L, tok] : {std::tuple<int64_t, int64_t, bool>{0, 5, false},
                           {2, 0, false},
                           {0, 0, true},
                           {3, 0, true}}) {
    AdalnCase c;
    c.batch = B;
    c.L = L;
    c.D = 9;
    c.per_token = tok;
    c.weight = c.bias = true;
    for (auto fwd : {adaln_fwd_ref, adaln_fwd_cpu}) {
      AdalnProblem pr(c);
      EXPECT_NO_THROW(fwd(pr.params()));
    }
    for (auto bwd : {adaln_bwd_ref, adaln_bwd_cpu}) {
      AdalnProblem pr(c);
      EXPECT_NO_THROW(bwd(pr.params()));
      for (int64_t j = 0; j < 9; ++j) {
        EXPECT_EQ(pr.dweight.get(0, j), 0.0);
        EXPECT_EQ(pr.dbias.get(0, j), 0.0);
        for (int64_t b = 0; b < pr.dscale.rows; ++b) {  // [B, D] zeros when per-sample
          EXPECT_EQ(pr.dscale.get(b, j), 0.0);
          EXPECT_EQ(pr.dshift.get(b, j), 0.0);
        }
      }
    }
  }
  AdalnParams p;  // all zero: rows = 0, dim = 0
  EXPECT_NO_THROW(adaln_fwd_cpu(p));
  EXPECT_NO_THROW(adaln_bwd_cpu(p));
}

// --- determinism ------------------------------------------------------------------------

std::vector<unsigned char> bwd_bytes(const AdalnCase& c, int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  AdalnProblem pr(c);
  adaln_fwd_cpu(pr.params());
  adaln_bwd_cpu(pr.params());
  omp_set_num_threads(before);
  std::vector<unsigned char> out;
  for (const Buffer* b :
       {&pr.y, &pr.mean, &pr.rstd, &pr.dx, &pr.dscale, &pr.dshift, &pr.dweight, &pr.dbias})
    out.insert(out.end(), b->bytes.begin(), b->bytes.end());
  return out;
}

TEST(adaln_determinism, BitIdenticalAcrossRunsAndThreadCounts) {
  for (bool tok : {false, true}) {
    AdalnCase c;
    c.batch = 3;
    c.L = 1367;
    c.D = 1536;
    c.per_token = tok;
    c.weight = c.bias = true;
    c.x_dtype = DType::BF16;
    const auto a = bwd_bytes(c, 2);
    EXPECT_EQ(a, bwd_bytes(c, 2)) << "two runs differ";
    EXPECT_EQ(a, bwd_bytes(c, 1)) << "1 vs 2 threads differ";
    EXPECT_EQ(a, bwd_bytes(c, 3)) << "3 vs 2 threads differ";
    EXPECT_EQ(a, bwd_bytes(c, 7)) << "7 vs 2 threads differ";
  }
}

// --- validate ---------------------------------------------------------------------------

void expect_invalid(const AdalnParams& p, AdalnPass pass, const std::string& field) {
  try {
    validate(p, pass);
    ADD_FAILURE() << "no exception; expected one naming " << field;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(adaln_validate, RejectsBadParamsNamingTheField) {
  AdalnCase c;
  c.batch = 2;
  c.L = 3;
  c.D = 8;
  c.weight = true;
  AdalnProblem pr(c);
  const AdalnParams good = pr.params();
  EXPECT_NO_THROW(validate(good, AdalnPass::Fwd));
  EXPECT_NO_THROW(validate(good, AdalnPass::Bwd));
  AdalnParams p = good;
  p.rows = -1;
  expect_invalid(p, AdalnPass::Fwd, "rows");
  p = good;
  p.dim = 0;
  expect_invalid(p, AdalnPass::Fwd, "dim");
  p = good;
  p.x_stride = 4;
  expect_invalid(p, AdalnPass::Fwd, "x_stride");
  p = good;
  p.x = nullptr;
  expect_invalid(p, AdalnPass::Fwd, "AdalnParams.x ");
  p = good;
  p.rows_per_sample = 4;
  expect_invalid(p, AdalnPass::Fwd, "rows");
  p = good;
  p.x_dtype = static_cast<DType>(7);
  expect_invalid(p, AdalnPass::Fwd, "x_dtype");
  p = good;
  p.eps = -1.f;
  expect_invalid(p, AdalnPass::Fwd, "eps");
  p = good;
  p.eps = std::nanf("");
  expect_invalid(p, AdalnPass::Fwd, "eps");
  p = good;
  p.y = nullptr;
  expect_invalid(p, AdalnPass::Fwd, "y");
  p = good;
  p.mean = nullptr;
  expect_invalid(p, AdalnPass::Bwd, "mean");
  p = good;
  p.dx_stride = 1;
  expect_invalid(p, AdalnPass::Bwd, "dx_stride");
  p = good;
  p.scale_stride = 2;
  expect_invalid(p, AdalnPass::Bwd, "scale_stride");
  p = good;
  p.weight = nullptr;
  expect_invalid(p, AdalnPass::Bwd, "dweight");
  p = good;
  p.dy = nullptr;
  expect_invalid(p, AdalnPass::Bwd, "dy");
  // Every entry point validates before touching memory.
  p = good;
  p.x_stride = 1;
  EXPECT_THROW(adaln_fwd_cpu(p), std::invalid_argument);
  EXPECT_THROW(adaln_bwd_cpu(p), std::invalid_argument);
  EXPECT_THROW(adaln_fwd_ref(p), std::invalid_argument);
  EXPECT_THROW(adaln_bwd_ref(p), std::invalid_argument);
}

// --- 16-bit conversions -----------------------------------------------------------------

TEST(adaln_half_types, Bf16RoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808001u)), 0x3f81);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x7f7fffffu)), 0x7f80);  // max float -> inf
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_TRUE(
      std::isnan(bf16_to_float(float_to_bf16(bits_to_float(0x7f800001u)))));  // low-payload sNaN
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(INFINITY))));
  for (uint32_t h = 0; h < 65536; ++h) {  // every bf16 round-trips
    const float f = bf16_to_float(uint16_t(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_bf16(f), h);
    }
  }
}

#if AL_HW_F16C
// The F16C converters, compiled for it by a target attribute (the build is baseline x86-64)
// and called only where the CPU has it (the AVX2 path's feature set includes F16C).
__attribute__((target("f16c"))) float hw_f16_to_float(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_float_to_f16(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#endif

TEST(adaln_half_types, F16MatchesHardwareConversion) {
  const bool hw = AL_HW_F16C && cpu_simd_supported(CpuSimd::Avx2);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_float(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_f16(f), h) << h;
#if AL_HW_F16C
    if (hw) {
      EXPECT_EQ(float_to_bits(f), float_to_bits(hw_f16_to_float(uint16_t(h)))) << h;
    }
#endif
  }
#if AL_HW_F16C
  for (uint64_t u = 0; hw && u < (1ull << 32); u += 65537) {  // 65536 floats over all bit patterns
    const float f = bits_to_float(uint32_t(u));
    const uint16_t hwv = hw_float_to_f16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f))));
    } else {
      EXPECT_EQ(float_to_f16(f), hwv) << std::hex << u;
    }
  }
#endif
  if (!hw) GTEST_SKIP() << "no F16C on this CPU: checked the software round trip only";
}

// --- 64-bit offsets ---------------------------------------------------------------------

// Rows 2^31 + 64 elements apart: a 32-bit offset would wrap. The mapping is lazily backed,
// so only the touched pages cost memory.
TEST(adaln_offsets, RowStridesPast2To32ElementsWork) {
  const int64_t D = 40, rows = 3, stride = (int64_t(1) << 31) + 64;
  const size_t bytes = size_t(stride * (rows - 1) + D) * 2;
  auto map = [&]() -> void* {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  };
  void* xm = map();
  void* ym = map();
  if (xm == nullptr || ym == nullptr)
    GTEST_SKIP() << "cannot reserve " << bytes << " bytes of address space";
  uint16_t* x = static_cast<uint16_t*>(xm);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < D; ++j) x[r * stride + j] = float_to_bf16(float(r + 1) * float(j % 5));
  std::vector<float> s(size_t(D), 0.f), t(size_t(D), 0.f), mean(rows), rstd(rows);
  AdalnParams p;
  p.rows = rows;
  p.dim = D;
  p.batch = 1;
  p.rows_per_sample = rows;
  p.x_dtype = DType::BF16;
  p.x = x;
  p.x_stride = stride;
  p.y = ym;
  p.y_stride = stride;
  p.scale = s.data();
  p.shift = t.data();
  p.scale_stride = p.shift_stride = D;
  p.mean = mean.data();
  p.rstd = rstd.data();
  adaln_fwd_cpu(p);
  const uint16_t* y = static_cast<const uint16_t*>(ym);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_NEAR(mean[r], 2.0 * (r + 1), 1e-5) << r;
    for (int64_t j = 0; j < D; ++j)
      EXPECT_NEAR(bf16_to_float(y[r * stride + j]), (float(j % 5) - 2.f) / std::sqrt(2.f), 0.02)
          << r << "," << j;
  }
  munmap(xm, bytes);
  munmap(ym, bytes);
}

}  // namespace
