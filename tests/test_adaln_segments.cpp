// Fused adaLN with segment-indexed modulation (cu_seqlens: a packed batch of samples of any
// lengths, segment i using modulation row i), CPU: every SIMD path and the reference against
// the fp64 reference run per-token on the modulation the segments expand to (dscale / dshift
// summed over each segment's rows), with the tolerance rule of DESIGN.md (adaln_check.h).
// Segments of length 0, 1 and many (chunks of the backward inside one segment and across
// its end), n = 1, D from 1 to 16,384 incl. primes, every dtype, int32 and int64 offsets.
// Also: uniform segments give the per-sample path's bits, bit-identical across thread
// counts, empty inputs, and the errors for bad offsets.
#include <gtest/gtest.h>
#include <omp.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/adaln_check.h"
#include "adaptiveload/kernels/simd_dispatch_cpu.h"

using namespace adaptiveload;
using adaln_check::AdalnCase;
using adaln_check::AdalnProblem;

namespace {

// (x dtype, mod dtype, affine) combinations; segments take [n, D] modulation.
std::vector<AdalnCase> combos() { return adaln_check::dtype_combos(false); }

AdalnCase segmented(AdalnCase c, std::vector<int64_t> lens, int64_t D, uint64_t seed,
                    bool i64 = true) {
  c.segments = std::move(lens);
  c.seg_i64 = i64;
  c.D = D;
  c.seed = seed;
  return c;
}

// The backward cuts a segment into chunks of about 128K elements (8 - 1024 rows): at
// D = 1536, 85 rows, so a 300-row segment has 4 chunks, the last one short.
std::vector<AdalnCase> matrix() {
  const std::vector<AdalnCase> cs = combos();
  const std::vector<std::vector<int64_t>> shapes = {
      {37},                                  // n = 1
      {0, 5, 0, 1, 30, 0},                   // empty first, between and last; length 1
      {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // many segments of one row
      {3, 0, 1, 300, 2, 129},                // one long segment among short ones
  };
  const std::vector<int64_t> dims = {1,    2,    7,    13,   64,    127,  257,
                                     1023, 1536, 4099, 8191, 12289, 16384};
  std::vector<AdalnCase> out;
  uint64_t seed = 5000;
  for (size_t i = 0; i < dims.size(); ++i)
    for (size_t k = 0; k < shapes.size(); ++k) {
      if (dims[i] > 1536 && k == 3) continue;  // keeps the wide rows' truth cheap
      out.push_back(
          segmented(cs[(i * 4 + k) % cs.size()], shapes[k], dims[i], seed++, (i + k) % 2 == 0));
    }
  // Every dtype combination on the long-segment shape at a mid D, with a padded stride.
  for (const AdalnCase& c : cs) {
    AdalnCase p = segmented(c, {3, 0, 1, 300, 2, 129}, 1500, seed++, true);
    p.pad = 5;
    out.push_back(p);
  }
  // Segments at the chunk size: 85 rows a chunk at D = 1536.
  out.push_back(segmented(cs[7], {85, 86, 84, 170, 0, 171}, 1536, seed++));
  // A large row mean (two-pass statistics).
  AdalnCase off = segmented(cs[1], {20, 44}, 1536, seed++);
  off.x_offset = 300;
  out.push_back(off);
  return out;
}

const std::vector<CpuSimd> kPaths = {CpuSimd::Avx512, CpuSimd::Avx2, CpuSimd::Scalar};

using PathCase = std::tuple<CpuSimd, AdalnCase>;

std::string case_name(const testing::TestParamInfo<PathCase>& info) {
  return std::string(cpu_simd_name(std::get<0>(info.param))) + "_" + std::to_string(info.index) +
         "_" + std::get<1>(info.param).name();
}

class AdalnSegCpu : public testing::TestWithParam<PathCase> {};

TEST_P(AdalnSegCpu, ForwardMatchesPerTokenReference) {
  const auto [path, c] = GetParam();
  if (!cpu_simd_supported(path))
    GTEST_SKIP() << "this CPU has no " << cpu_simd_name(path) << " path";
  const auto r = adaln_check::check_adaln_fwd(
      c, [path = path](const AdalnParams& p) { adaln_fwd_cpu(p, path); });
  EXPECT_TRUE(r.ok) << r.report;
}

TEST_P(AdalnSegCpu, BackwardMatchesPerTokenReference) {
  const auto [path, c] = GetParam();
  if (!cpu_simd_supported(path))
    GTEST_SKIP() << "this CPU has no " << cpu_simd_name(path) << " path";
  const auto r = adaln_check::check_adaln_bwd(
      c, [path = path](const AdalnParams& p) { adaln_bwd_cpu(p, path); });
  EXPECT_TRUE(r.ok) << r.report;
}

INSTANTIATE_TEST_SUITE_P(adaln, AdalnSegCpu,
                         testing::Combine(testing::ValuesIn(kPaths), testing::ValuesIn(matrix())),
                         case_name);

// The reference's own segment path, in 16-bit storage, against the per-token truth.
TEST(adaln_seg_ref, SegmentPathMatchesPerTokenReference) {
  uint64_t seed = 6000;
  for (const AdalnCase& c0 : combos())
    for (const std::vector<int64_t>& lens :
         {std::vector<int64_t>{0, 1, 40, 0, 3}, std::vector<int64_t>{29}}) {
      const AdalnCase c = segmented(c0, lens, 300, seed, seed % 2 == 0);
      ++seed;
      const auto f = adaln_check::check_adaln_fwd(c, adaln_fwd_ref);
      EXPECT_TRUE(f.ok) << c.name() << "\n" << f.report;
      const auto b = adaln_check::check_adaln_bwd(c, adaln_bwd_ref);
      EXPECT_TRUE(b.ok) << c.name() << "\n" << b.report;
    }
}

// Every output of a forward + backward, as bytes, on `threads` OpenMP threads.
std::vector<unsigned char> fwd_bwd_bytes(const AdalnCase& c, CpuSimd path, int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  AdalnProblem pr(c);
  adaln_fwd_cpu(pr.params(), path);
  adaln_bwd_cpu(pr.params(), path);
  omp_set_num_threads(before);
  std::vector<unsigned char> out;
  for (const adaln_check::Buffer* b :
       {&pr.y, &pr.mean, &pr.rstd, &pr.dx, &pr.dscale, &pr.dshift, &pr.dweight, &pr.dbias})
    out.insert(out.end(), b->bytes.begin(), b->bytes.end());
  return out;
}

class AdalnSegPath : public testing::TestWithParam<CpuSimd> {
 protected:
  void SetUp() override {
    if (!cpu_simd_supported(GetParam()))
      GTEST_SKIP() << "this CPU has no " << cpu_simd_name(GetParam()) << " path";
  }
};

// A per-sample batch is the case of uniform segments: B samples of L rows and B segments
// of L rows give the same bits (the same chunks, the same order of every sum).
TEST_P(AdalnSegPath, UniformSegmentsGivePerSampleBits) {
  for (int64_t L : {int64_t(1), int64_t(7), int64_t(411)}) {
    AdalnCase smp;
    smp.batch = 3;
    smp.L = L;
    smp.D = 1500;
    smp.weight = smp.bias = true;
    smp.x_dtype = DType::BF16;
    AdalnCase seg = smp;
    seg.segments.assign(3, L);
    seg.seg_i64 = L != 7;
    EXPECT_EQ(fwd_bwd_bytes(smp, GetParam(), 2), fwd_bwd_bytes(seg, GetParam(), 2)) << "L = " << L;
  }
}

TEST_P(AdalnSegPath, BitIdenticalAcrossThreadCounts) {
  AdalnCase c = segmented(combos()[3], {0, 411, 1, 0, 900, 2, 2, 300}, 1500, 77);
  c.x_dtype = DType::BF16;
  const auto a = fwd_bwd_bytes(c, GetParam(), 2);
  EXPECT_EQ(a, fwd_bwd_bytes(c, GetParam(), 2)) << "two runs differ";
  EXPECT_EQ(a, fwd_bwd_bytes(c, GetParam(), 1)) << "1 vs 2 threads differ";
  EXPECT_EQ(a, fwd_bwd_bytes(c, GetParam(), 5)) << "5 vs 2 threads differ";
}

// No rows, three empty segments: the reductions are sums over no rows (zero).
TEST_P(AdalnSegPath, EmptyRowsZeroEverySegment) {
  AdalnCase c = segmented(combos()[1], {0, 0, 0}, 40, 3);
  AdalnProblem pr(c);
  adaln_fwd_cpu(pr.params(), GetParam());
  adaln_bwd_cpu(pr.params(), GetParam());
  for (int64_t j = 0; j < 40; ++j) {
    EXPECT_EQ(pr.dweight.get(0, j), 0.0);
    EXPECT_EQ(pr.dbias.get(0, j), 0.0);
    for (int64_t s = 0; s < 3; ++s) {
      EXPECT_EQ(pr.dscale.get(s, j), 0.0) << "segment " << s;
      EXPECT_EQ(pr.dshift.get(s, j), 0.0) << "segment " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(adaln, AdalnSegPath, testing::ValuesIn(kPaths),
                         [](const testing::TestParamInfo<CpuSimd>& i) {
                           return cpu_simd_name(i.param);
                         });

// Bad offsets and bad combinations: std::invalid_argument naming the field and the entry.
std::string error_of(AdalnParams p, bool values = true) {
  try {
    if (values)
      adaln_fwd_cpu(p);
    else
      validate(p, AdalnPass::Fwd);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(adaln_seg_validate, BadOffsetsNameTheEntry) {
  AdalnProblem pr(segmented(combos()[0], {2, 3, 4}, 16, 1));
  auto expect = [&](std::vector<int64_t> cu, const std::string& want) {
    pr.cu64 = cu;
    const std::string msg = error_of(pr.params());
    EXPECT_NE(msg.find(want), std::string::npos) << "got: " << msg;
  };
  expect({1, 2, 5, 9}, "AdalnParams.cu_seqlens[0] (1) must be 0");
  expect({0, 4, 3, 9},
         "AdalnParams.cu_seqlens[2] (3) < cu_seqlens[1] (4): segment offsets must ascend");
  expect({0, 2, 5, 8}, "AdalnParams.cu_seqlens[3] (8) must equal rows (9)");
  pr.cu64 = {0, 2, 5, 9};
  EXPECT_EQ(error_of(pr.params()), "");
  // int32 offsets are read as int32.
  AdalnProblem p32(segmented(combos()[0], {2, 3, 4}, 16, 1, false));
  p32.cu32 = {0, 2, 9, 5};
  EXPECT_NE(error_of(p32.params()).find("cu_seqlens[3] (5) < cu_seqlens[2] (9)"),
            std::string::npos);
}

TEST(adaln_seg_validate, SegmentsExcludePerTokenAndUniformSamples) {
  AdalnProblem pr(segmented(combos()[0], {2, 3}, 16, 1));
  AdalnParams p = pr.params();
  p.per_token = true;
  EXPECT_NE(error_of(p, false).find("AdalnParams.cu_seqlens is set but per_token is true"),
            std::string::npos);
  p = pr.params();
  p.rows_per_sample = 5;
  EXPECT_NE(error_of(p, false).find("AdalnParams.rows_per_sample (5) must be 0 with cu_seqlens"),
            std::string::npos);
  p = pr.params();
  p.batch = 0;
  EXPECT_NE(error_of(p, false).find("AdalnParams.batch is 0 but rows is 5"), std::string::npos);
  p = pr.params();
  EXPECT_EQ(error_of(p, false), "");
}

}  // namespace
