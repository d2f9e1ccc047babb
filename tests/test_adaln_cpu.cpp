// Fused adaLN, CPU: the optimised path against the fp64 reference on awkward shapes
// (Liger style), with the tolerance rule of DESIGN.md (see adaln_check.h).
//
// Matrix, sampled to stay fast on 2 cores: every D at 257 rows (rotating through the
// dtype / modulation / affine combinations so each appears), every combination at D=64,
// every row count at a few D, and multi-sample shapes whose chunks cross sample borders.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/adaln_check.h"

using namespace adaptiveload;
using adaln_check::AdalnCase;

namespace {

const std::vector<int64_t> kDims = {1, 7, 64, 1023, 1152, 1500, 1536, 3000, 3072, 5120};
const std::vector<int64_t> kRows = {1, 3, 257, 4099};

// All (x dtype, mod dtype, per_token, affine) combinations.
std::vector<AdalnCase> combos() {
  std::vector<AdalnCase> out;
  for (DType xt : {DType::F32, DType::BF16, DType::F16})
    for (bool mod_f32 : {true, false})
      for (bool per_token : {false, true})
        for (int affine : {0, 1}) {
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
    for (size_t k = 0; k < 3; ++k) out.push_back(with_shape(cs[(i * 3 + k) % cs.size()], 1, 257, kDims[i], seed++));
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
      for (size_t k : {2, 5}) out.push_back(with_shape(cs[(k + size_t(N)) % cs.size()], 1, N, D, seed++));
  out.push_back(with_shape(cs[10], 1, 4099, 64, seed++));
  // Several samples; chunks of the backward cross and end at sample borders.
  out.push_back(with_shape(cs[2], 3, 1, 1023, seed++));       // rows = 3, L = 1
  out.push_back(with_shape(cs[4], 3, 1367, 64, seed++));      // 4101 rows
  out.push_back(with_shape(cs[8], 5, 200, 1536, seed++));     // partial chunks
  out.push_back(with_shape(cs[16], 4, 33, 3072, seed++));     // bf16 mod
  out.push_back(with_shape(cs[20], 2, 129, 5120, seed++));    // f16, affine
  // A large row mean (two-pass statistics must not lose the variance).
  AdalnCase off = with_shape(cs[1], 1, 64, 1536, seed++);
  off.x_offset = 300;
  out.push_back(off);
  return out;
}

std::string case_name(const testing::TestParamInfo<AdalnCase>& info) {
  return std::to_string(info.index) + "_" + info.param.name();
}

class AdalnCpuFwd : public testing::TestWithParam<AdalnCase> {};
class AdalnCpuBwd : public testing::TestWithParam<AdalnCase> {};

TEST_P(AdalnCpuFwd, MatchesReferenceWithinEagerError) {
  const auto r = adaln_check::check_adaln_fwd(GetParam(), adaln_fwd_cpu);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST_P(AdalnCpuBwd, MatchesReferenceWithinEagerError) {
  const auto r = adaln_check::check_adaln_bwd(GetParam(), adaln_bwd_cpu);
  EXPECT_TRUE(r.ok) << r.report;
}

INSTANTIATE_TEST_SUITE_P(adaln, AdalnCpuFwd, testing::ValuesIn(matrix()), case_name);
INSTANTIATE_TEST_SUITE_P(adaln, AdalnCpuBwd, testing::ValuesIn(matrix()), case_name);

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
