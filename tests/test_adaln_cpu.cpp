// Fused adaLN, CPU: the optimised path against the fp64 reference on awkward shapes
// (Liger style), with the tolerance rule of DESIGN.md (see adaln_check.h), on every SIMD
// path (AVX-512, AVX2, scalar; a path this CPU lacks is skipped, with the reason). Also per
// path: determinism across thread counts, NaN rows, and bit-exact bf16 / fp16 conversions;
// and the run-time choice of the path (AL_SIMD).
//
// Matrix, sampled to stay fast on 2 cores: every D at 257 rows (rotating through the
// dtype / modulation / affine combinations so each appears), every combination at D=64,
// every row count at a few D, and multi-sample shapes whose chunks cross sample borders.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/adaln_check.h"
#include "adaptiveload/kernels/half_types.h"
#include "adaptiveload/kernels/simd_dispatch_cpu.h"

using namespace adaptiveload;
using adaln_check::AdalnCase;

namespace {

const std::vector<int64_t> kDims = {1, 7, 64, 1023, 1152, 1500, 1536, 3000, 3072, 5120};
const std::vector<int64_t> kRows = {1, 3, 257, 4099};

// All (x dtype, mod dtype, per_token, affine) combinations.
std::vector<AdalnCase> combos() { return adaln_check::dtype_combos(true); }

AdalnCase with_shape(AdalnCase c, int64_t batch, int64_t L, int64_t D, uint64_t seed) {
  c.batch = batch;
  c.L = L;
  c.D = D;
  c.seed = seed;
  return c;
}

std::vector<AdalnCase> matrix() {
  const std::vector<AdalnCase> cs = combos();
  std::vector<AdalnCase> out;
  uint64_t seed = 1;
  // Every D at 257 rows, three combinations each, rotating.
  for (size_t i = 0; i < kDims.size(); ++i)
    for (size_t k = 0; k < 3; ++k)
      out.push_back(with_shape(cs[(i * 3 + k) % cs.size()], 1, 257, kDims[i], seed++));
  // Every combination at D = 64 (and a padded stride, and weight-only / bias-only).
  for (const AdalnCase& c : cs) {
    AdalnCase p = with_shape(c, 1, 257, 64, seed++);
    p.pad = 3;
    out.push_back(p);
  }
  AdalnCase w_only = with_shape(cs[3], 2, 100, 130, seed++);
  w_only.bias = false;
  out.push_back(w_only);
  AdalnCase b_only = with_shape(cs[7], 2, 100, 130, seed++);
  b_only.weight = false;
  out.push_back(b_only);
  // Every row count at a few D (per-sample rows are one sample: 257 and 4099 are prime).
  for (int64_t D : {7, 1500})
    for (int64_t N : kRows)
      for (size_t k : {2, 5})
        out.push_back(with_shape(cs[(k + size_t(N)) % cs.size()], 1, N, D, seed++));
  out.push_back(with_shape(cs[10], 1, 4099, 64, seed++));
  // Several samples; chunks of the backward cross and end at sample borders.
  out.push_back(with_shape(cs[2], 3, 1, 1023, seed++));     // rows = 3, L = 1
  out.push_back(with_shape(cs[4], 3, 1367, 64, seed++));    // 4101 rows
  out.push_back(with_shape(cs[8], 5, 200, 1536, seed++));   // partial chunks
  out.push_back(with_shape(cs[16], 4, 33, 3072, seed++));   // bf16 mod
  out.push_back(with_shape(cs[20], 2, 129, 5120, seed++));  // f16, affine
  // A large row mean (two-pass statistics must not lose the variance).
  AdalnCase off = with_shape(cs[1], 1, 64, 1536, seed++);
  off.x_offset = 300;
  out.push_back(off);
  return out;
}

const std::vector<CpuSimd> kPaths = {CpuSimd::Avx512, CpuSimd::Avx2, CpuSimd::Scalar};

std::string unsupported(CpuSimd path) {
  return std::string("this CPU (or build) has no ") + cpu_simd_name(path) + " path";
}

using PathCase = std::tuple<CpuSimd, AdalnCase>;

std::string case_name(const testing::TestParamInfo<PathCase>& info) {
  return std::string(cpu_simd_name(std::get<0>(info.param))) + "_" + std::to_string(info.index) +
         "_" + std::get<1>(info.param).name();
}

class AdalnCpuFwd : public testing::TestWithParam<PathCase> {};
class AdalnCpuBwd : public testing::TestWithParam<PathCase> {};

TEST_P(AdalnCpuFwd, MatchesReferenceWithinEagerError) {
  const auto [path, c] = GetParam();
  if (!cpu_simd_supported(path)) GTEST_SKIP() << unsupported(path);
  const auto r = adaln_check::check_adaln_fwd(
      c, [path = path](const AdalnParams& p) { adaln_fwd_cpu(p, path); });
  EXPECT_TRUE(r.ok) << r.report;
}

TEST_P(AdalnCpuBwd, MatchesReferenceWithinEagerError) {
  const auto [path, c] = GetParam();
  if (!cpu_simd_supported(path)) GTEST_SKIP() << unsupported(path);
  const auto r = adaln_check::check_adaln_bwd(
      c, [path = path](const AdalnParams& p) { adaln_bwd_cpu(p, path); });
  EXPECT_TRUE(r.ok) << r.report;
}

INSTANTIATE_TEST_SUITE_P(adaln, AdalnCpuFwd,
                         testing::Combine(testing::ValuesIn(kPaths), testing::ValuesIn(matrix())),
                         case_name);
INSTANTIATE_TEST_SUITE_P(adaln, AdalnCpuBwd,
                         testing::Combine(testing::ValuesIn(kPaths), testing::ValuesIn(matrix())),
                         case_name);

// --- per path: determinism, non-finite rows, 16-bit conversions -----------------------

class AdalnCpuPath : public testing::TestWithParam<CpuSimd> {
 protected:
  void SetUp() override {
    if (!cpu_simd_supported(GetParam())) GTEST_SKIP() << unsupported(GetParam());
  }
};

std::string path_name(const testing::TestParamInfo<CpuSimd>& info) {
  return cpu_simd_name(info.param);
}

// Every output of a forward + backward, as bytes, run on `threads` OpenMP threads.
std::vector<unsigned char> fwd_bwd_bytes(const AdalnCase& c, CpuSimd path, int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  adaln_check::AdalnProblem pr(c);
  adaln_fwd_cpu(pr.params(), path);
  adaln_bwd_cpu(pr.params(), path);
  omp_set_num_threads(before);
  std::vector<unsigned char> out;
  for (const adaln_check::Buffer* b :
       {&pr.y, &pr.mean, &pr.rstd, &pr.dx, &pr.dscale, &pr.dshift, &pr.dweight, &pr.dbias})
    out.insert(out.end(), b->bytes.begin(), b->bytes.end());
  return out;
}

TEST_P(AdalnCpuPath, BitIdenticalAcrossThreadCounts) {
  for (bool tok : {false, true}) {
    AdalnCase c;
    c.batch = 3;
    c.L = 411;
    c.D = 1500;
    c.per_token = tok;
    c.weight = c.bias = true;
    c.x_dtype = DType::BF16;
    const auto a = fwd_bwd_bytes(c, GetParam(), 2);
    EXPECT_EQ(a, fwd_bwd_bytes(c, GetParam(), 2)) << "two runs differ";
    EXPECT_EQ(a, fwd_bwd_bytes(c, GetParam(), 1)) << "1 vs 2 threads differ";
    EXPECT_EQ(a, fwd_bwd_bytes(c, GetParam(), 5)) << "5 vs 2 threads differ";
  }
}

TEST_P(AdalnCpuPath, NanOrInfInRowGivesNanRowOnlyThere) {
  for (double bad : {std::nan(""), double(INFINITY)})
    for (int64_t D : {1, 7, 17, 64, 1500}) {
      AdalnCase c;
      c.L = 5;
      c.D = D;
      c.x_dtype = DType::BF16;
      adaln_check::AdalnProblem pr(c);
      pr.x.set(2, D / 2, bad);  // row 2 is poisoned
      adaln_fwd_cpu(pr.params(), GetParam());
      adaln_bwd_cpu(pr.params(), GetParam());  // with the forward's NaN stats for row 2
      for (int64_t r = 0; r < 5; ++r)
        for (int64_t j = 0; j < D; ++j) {
          EXPECT_EQ(std::isnan(pr.y.get(r, j)), r == 2)
              << "bad=" << bad << " D=" << D << " y " << r << "," << j;
          EXPECT_EQ(std::isnan(pr.dx.get(r, j)), r == 2)
              << "bad=" << bad << " D=" << D << " dx " << r << "," << j;
        }
    }
}

// Every fp32 pattern of a 65537-step walk over all 2^32 (65536 floats of every exponent,
// NaNs and infinities among them), bf16 / fp16 ties and boundaries, and subnormals.
std::vector<float> conversion_inputs() {
  std::vector<float> v;
  for (uint64_t u = 0; u < (1ull << 32); u += 65537) v.push_back(bits_to_float(uint32_t(u)));
  for (uint32_t u :
       {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7f7fffffu, 0x7f800001u, 0xff800000u, 0x477ff000u,
        0x477fefffu, 0x33000000u, 0x33000001u, 0x387fc000u, 0x38800000u, 0x00000001u, 0x80400000u})
    v.push_back(bits_to_float(u));
  return v;
}

// y = n * (1 + scale) + shift with scale = -1 is shift rounded once to x's dtype, so y shows
// the path's fp32 -> 16-bit store (vector body, non-temporal and masked tail) bit for bit.
// Zeros are left out: n * 0 may carry n's sign, so -0 can come out as +0.
template <typename TM>
void expect_stores_exact(CpuSimd path, DType x_dtype, DType mod_dtype,
                         const std::vector<TM>& shift_vals, uint16_t (*expected)(float),
                         const char* what) {
  const int64_t D = 4099;  // prime: rows start at every alignment; masked tails
  const int64_t N = (int64_t(shift_vals.size()) + D - 1) / D;
  std::vector<uint16_t> x(size_t(N * D)), y(size_t(N * D), 0x5555);
  for (size_t i = 0; i < x.size(); ++i)  // finite rows of both signs
    x[i] = x_dtype == DType::BF16 ? float_to_bf16(float(i % 13) - 6.f)
                                  : float_to_f16(float(i % 13) - 6.f);
  std::vector<TM> scale(size_t(N * D)), shift(size_t(N * D));
  const float minus_one = -1.f;
  TM m1;
  if constexpr (sizeof(TM) == 4)
    m1 = minus_one;
  else
    m1 = mod_dtype == DType::BF16 ? TM{float_to_bf16(minus_one)} : TM{float_to_f16(minus_one)};
  for (size_t i = 0; i < scale.size(); ++i) {
    scale[i] = m1;
    shift[i] = shift_vals[i % shift_vals.size()];
  }
  std::vector<float> mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  AdalnParams p;
  p.rows = N;
  p.dim = D;
  p.batch = 1;
  p.rows_per_sample = N;
  p.per_token = true;
  p.x_dtype = x_dtype;
  p.mod_dtype = mod_dtype;
  p.x = x.data();
  p.y = y.data();
  p.scale = scale.data();
  p.shift = shift.data();
  p.mean = mean.data();
  p.rstd = rstd.data();
  adaln_set_contiguous_strides(p);
  adaln_fwd_cpu(p, path);
  int64_t bad = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const float t = to_float(shift[i]);
    if (t == 0.f) continue;
    const uint16_t want = expected(t);
    if (y[i] != want && bad++ < 5)
      ADD_FAILURE() << cpu_simd_name(path) << " " << what << ": input bits 0x" << std::hex
                    << float_to_bits(t) << " gave 0x" << y[i] << ", want 0x" << want;
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST_P(AdalnCpuPath, Fp32To16BitStoresAreExact) {
  const std::vector<float> in = conversion_inputs();
  expect_stores_exact(GetParam(), DType::BF16, DType::F32, in, float_to_bf16, "fp32 -> bf16");
  expect_stores_exact(GetParam(), DType::F16, DType::F32, in, float_to_f16, "fp32 -> f16");
}

// With 16-bit modulation the shift goes 16-bit -> fp32 (the path's load) -> 16-bit (its
// store): every one of the 65536 patterns must come back as the scalar conversions give it
// (itself, or for NaN the quieted NaN).
TEST_P(AdalnCpuPath, SixteenBitLoadsAreExact) {
  std::vector<bf16_t> b;
  std::vector<f16_t> h;
  for (uint32_t u = 0; u < 65536; ++u) {
    b.push_back(bf16_t{uint16_t(u)});
    h.push_back(f16_t{uint16_t(u)});
  }
  expect_stores_exact(GetParam(), DType::BF16, DType::BF16, b, float_to_bf16,
                      "bf16 -> fp32 -> bf16");
  expect_stores_exact(GetParam(), DType::F16, DType::F16, h, float_to_f16, "f16 -> fp32 -> f16");
}

INSTANTIATE_TEST_SUITE_P(adaln, AdalnCpuPath, testing::ValuesIn(kPaths), path_name);

// --- run-time choice of the path --------------------------------------------------------

TEST(adaln_simd_dispatch, BestIsSupportedAndScalarAlwaysIs) {
  EXPECT_TRUE(cpu_simd_supported(CpuSimd::Scalar));
  EXPECT_TRUE(cpu_simd_supported(cpu_simd_best()));
  // A wider path implies the narrower ones (the override lowers along this order).
  if (cpu_simd_supported(CpuSimd::Avx512)) {
    EXPECT_TRUE(cpu_simd_supported(CpuSimd::Avx2));
  }
  for (CpuSimd s : kPaths) {
    CpuSimd back = CpuSimd::Scalar;
    EXPECT_TRUE(parse_cpu_simd(cpu_simd_name(s), &back));
    EXPECT_EQ(back, s);
  }
  CpuSimd out = CpuSimd::Avx2;
  EXPECT_FALSE(parse_cpu_simd("AVX2", &out));
  EXPECT_FALSE(parse_cpu_simd("", &out));
  EXPECT_EQ(out, CpuSimd::Avx2);
}

TEST(adaln_simd_dispatch, OverrideSelectsLowersOrIgnores) {
  std::string note = "stale";
  for (CpuSimd best : kPaths) {
    EXPECT_EQ(resolve_cpu_simd(nullptr, best, &note), best);
    EXPECT_EQ(note, "");
    EXPECT_EQ(resolve_cpu_simd("", best, &note), best);
    EXPECT_EQ(resolve_cpu_simd("auto", best, &note), best);
    EXPECT_EQ(resolve_cpu_simd("scalar", best, &note), CpuSimd::Scalar);
    EXPECT_EQ(note, "");
  }
  EXPECT_EQ(resolve_cpu_simd("avx2", CpuSimd::Avx512, &note), CpuSimd::Avx2);
  EXPECT_EQ(note, "");
  EXPECT_EQ(resolve_cpu_simd("avx512", CpuSimd::Avx2, &note), CpuSimd::Avx2);  // never SIGILL
  EXPECT_NE(note.find("AL_SIMD=avx512"), std::string::npos) << note;
  EXPECT_NE(note.find("using avx2"), std::string::npos) << note;
  EXPECT_EQ(resolve_cpu_simd("avx2", CpuSimd::Scalar, &note), CpuSimd::Scalar);
  EXPECT_EQ(resolve_cpu_simd("sse9", CpuSimd::Avx512, &note), CpuSimd::Avx512);
  EXPECT_NE(note.find("not one of scalar, avx2, avx512, auto"), std::string::npos) << note;
  EXPECT_EQ(resolve_cpu_simd("avx2", CpuSimd::Avx512), CpuSimd::Avx2);  // note is optional
}

TEST(adaln_simd_dispatch, DispatchedPathFollowsAlSimd) {
  const CpuSimd d = adaln_cpu_simd();
  EXPECT_TRUE(cpu_simd_supported(d));
  EXPECT_EQ(d, resolve_cpu_simd(std::getenv("AL_SIMD"), cpu_simd_best()));
  EXPECT_EQ(adaln_cpu_simd(), d);  // decided once
}

TEST(adaln_simd_dispatch, UnsupportedPathIsAnErrorNotACrash) {
  if (cpu_simd_best() == CpuSimd::Avx512) GTEST_SKIP() << "this CPU runs every path";
  for (CpuSimd s : kPaths) {
    if (cpu_simd_supported(s)) continue;
    adaln_check::AdalnProblem pr(AdalnCase{});
    EXPECT_THROW(adaln_fwd_cpu(pr.params(), s), std::invalid_argument) << cpu_simd_name(s);
    EXPECT_THROW(adaln_bwd_cpu(pr.params(), s), std::invalid_argument) << cpu_simd_name(s);
  }
}

// The reference itself, run in 16-bit storage, obeys the same rule (it rounds once).
TEST(adaln_ref, SixteenBitStorageWithinEagerError) {
  for (const AdalnCase& c0 : combos()) {
    const AdalnCase c = with_shape(c0, 2, 37, 300, 99);
    const auto f = adaln_check::check_adaln_fwd(c, adaln_fwd_ref);
    EXPECT_TRUE(f.ok) << c.name() << "\n" << f.report;
    const auto b = adaln_check::check_adaln_bwd(c, adaln_bwd_ref);
    EXPECT_TRUE(b.ok) << c.name() << "\n" << b.report;
  }
}

}  // namespace
