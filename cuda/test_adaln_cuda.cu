// Fused adaLN, CUDA: the kernels against the fp64 CPU reference with the tolerance rule
// of DESIGN.md (adaln_check.h), plus determinism, NaN rows, empty tensors, grids beyond
// 65,535 blocks, and the CUDA-specific parameter checks.
//
// Two ways to build it:
//   - with gtest (AL_CUDA_TEST_GTEST defined; cuda/CMakeLists.txt): every test SKIPs
//     cleanly (GTEST_SKIP) when there is no usable GPU; `--small` as below. The same
//     build runs on the CPU under tests/cuda_emu (ctest cuda_emu.*, cuda_emu_asan.*);
//   - standalone (scripts/gpu_check.sh, where GTest is not installed): a plain main() that
//     runs every test, prints "PASS name" / "FAIL name" / "SKIP name", and exits 0 when
//     nothing failed. `--filter=substr` runs only the tests whose name contains substr;
//     `--small` runs a reduced matrix (used under compute-sanitizer).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "adaln_cuda.h"
#include "adaln_cuda_testing.h"
#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/adaln_check.h"

using namespace adaptiveload;
using adaln_check::AdalnCase;
using adaln_check::AdalnProblem;
using adaln_check::Buffer;
using cuda_testing::run_bwd_cuda;
using cuda_testing::run_fwd_cuda;

namespace {

// ------------------------------------------------------------------ mini test harness

int g_failures = 0;
bool g_small = false;
#define AL_CHECK(cond, msg)                                                     \
  do {                                                                          \
    if (!(cond)) {                                                              \
      ++g_failures;                                                             \
      std::ostringstream al_os_;                                                \
      al_os_ << msg;                                                            \
      std::printf("  %s:%d: CHECK(%s) failed: %s\n", __FILE__, __LINE__, #cond, \
                  al_os_.str().c_str());                                        \
    }                                                                           \
  } while (0)

std::vector<AdalnCase> combos() { return adaln_check::dtype_combos(true, true); }

AdalnCase shaped(AdalnCase c, int64_t B, int64_t L, int64_t D, uint64_t seed, int64_t pad = 0) {
  c.batch = B;
  c.L = L;
  c.D = D;
  c.seed = seed;
  c.pad = pad;
  return c;
}

std::vector<AdalnCase> matrix() {
  const auto cs = combos();
  std::vector<AdalnCase> out;
  uint64_t seed = 100;
  const std::vector<int64_t> dims = {1, 7, 64, 1023, 1152, 1500, 1536, 3000, 3072, 5120};
  for (size_t i = 0; i < dims.size(); ++i)
    for (size_t k = 0; k < (g_small ? 1u : 3u); ++k)
      out.push_back(shaped(cs[(i * 3 + k) % cs.size()], 1, g_small ? 33 : 257, dims[i], seed++));
  if (g_small) return out;
  for (const AdalnCase& c : cs) out.push_back(shaped(c, 2, 100, 1536, seed++, 0));  // vector path
  for (const AdalnCase& c : cs)
    out.push_back(shaped(c, 2, 100, 1536, seed++, 3));  // misaligned rows
  for (int64_t D : {7, 1500})
    for (int64_t N : {1, 3, 257, 4099})
      out.push_back(shaped(cs[size_t(N + D) % cs.size()], 1, N, D, seed++));
  out.push_back(shaped(cs[1], 3, 1367, 64, seed++));
  out.push_back(shaped(cs[4], 5, 200, 1536, seed++));
  out.push_back(shaped(cs[9], 4, 33, 3072, seed++));
  out.push_back(shaped(cs[3], 2, 65, 4104, seed++));  // affine backward with 2 vectors a thread
  out.push_back(shaped(cs[5], 2, 40, 8192, seed++));  // the largest D
  out.push_back(shaped(cs[6], 1, 3000, 8, seed++));   // tiny D: many rows a block
  AdalnCase off = shaped(cs[0], 1, 64, 1536, seed++);
  off.x_offset = 300;
  out.push_back(off);
  return out;
}

void test_matrix_fwd() {
  for (const AdalnCase& c : matrix()) {
    const auto r = adaln_check::check_adaln_fwd(c, run_fwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
  }
}

void test_matrix_bwd() {
  for (const AdalnCase& c : matrix()) {
    const auto r = adaln_check::check_adaln_bwd(c, run_bwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
  }
}

std::vector<unsigned char> outputs(AdalnProblem& pr) {
  std::vector<unsigned char> v;
  for (const Buffer* b :
       {&pr.y, &pr.mean, &pr.rstd, &pr.dx, &pr.dscale, &pr.dshift, &pr.dweight, &pr.dbias})
    v.insert(v.end(), b->bytes.begin(), b->bytes.end());
  return v;
}

void test_determinism() {
  for (bool tok : {false, true}) {
    AdalnCase c = shaped(combos()[tok ? 7 : 5], 3, g_small ? 200 : 3001, 1536, 5);
    c.weight = c.bias = true;
    std::vector<unsigned char> first;
    for (int run = 0; run < 3; ++run) {
      AdalnProblem pr(c);
      run_fwd_cuda(pr.params());
      run_bwd_cuda(pr.params());
      const auto o = outputs(pr);
      if (run == 0)
        first = o;
      else
        AL_CHECK(o == first, c.name() << ": run " << run << " differs from run 0");
    }
  }
}

void test_nan_rows() {
  for (int64_t D : {1, 7, 64, 1536, 1500}) {
    AdalnCase c = shaped(combos()[2], 1, 5, D, 9);
    AdalnProblem pr(c);
    pr.x.set(2, D / 2, std::nan(""));
    run_fwd_cuda(pr.params());
    run_bwd_cuda(pr.params());
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t j = 0; j < D; ++j) {
        const bool bad = r == 2;
        AL_CHECK(std::isnan(pr.y.get(r, j)) == bad, "D=" << D << " y[" << r << "," << j << "]");
        AL_CHECK(std::isnan(pr.dx.get(r, j)) == bad, "D=" << D << " dx[" << r << "," << j << "]");
      }
  }
}

void test_empty() {
  struct E {
    int64_t B, L;
    bool tok;
  };
  for (const E& e : {E{0, 4, false}, E{2, 0, false}, E{0, 0, true}, E{3, 0, true}}) {
    AdalnCase c = shaped(combos()[1], e.B, e.L, 40, 3);
    c.per_token = e.tok;
    c.weight = c.bias = true;
    AdalnProblem pr(c);
    run_fwd_cuda(pr.params());
    run_bwd_cuda(pr.params());
    for (int64_t j = 0; j < 40; ++j) {
      AL_CHECK(pr.dweight.get(0, j) == 0.0, "dweight not zeroed, B=" << e.B << " L=" << e.L);
      AL_CHECK(pr.dbias.get(0, j) == 0.0, "dbias not zeroed");
      for (int64_t b = 0; b < pr.dscale.rows; ++b)
        AL_CHECK(pr.dscale.get(b, j) == 0.0 && pr.dshift.get(b, j) == 0.0,
                 "dscale/dshift not zeroed");
    }
  }
}

// More chunks than a 16-bit grid dimension could hold (and than the device's resident
// blocks: the grid-stride loop walks them).
void test_many_blocks() {
  AdalnCase a = shaped(combos()[0], g_small ? 2000 : 70000, 1, 16,
                       11);  // per-sample, L = 1: one chunk a sample
  auto r = adaln_check::check_adaln_fwd(a, run_fwd_cuda);
  AL_CHECK(r.ok, a.name() << "\n" << r.report);
  r = adaln_check::check_adaln_bwd(a, run_bwd_cuda);
  AL_CHECK(r.ok, a.name() << "\n" << r.report);
}

// Parameter checks need no device: they throw before any launch.
void test_cuda_limits() {
  AdalnCase c = shaped(combos()[1], 1, 4, 16, 1);
  AdalnProblem pr(c);
  AdalnParams p = pr.params();
  AL_CHECK(adaln_cuda_max_dim() >= (int64_t(1) << 30), "D is limited only by 32-bit columns");
  p.dim = adaln_cuda_max_dim() + 1;
  p.x_stride = p.y_stride = p.dy_stride = p.dx_stride = p.scale_stride = p.shift_stride = p.dim;
  p.dscale_stride = p.dshift_stride = p.dim;
  bool threw = false;
  try {
    adaln_fwd_cuda(p, nullptr);
  } catch (const std::invalid_argument& e) {
    threw = std::string(e.what()).find("dim") != std::string::npos;
  }
  AL_CHECK(threw, "dim above the CUDA limit must throw naming dim");
  p = pr.params();
  p.mod_dtype = DType::F16;  // x is bf16: mixed 16-bit types are not supported on CUDA
  threw = false;
  try {
    adaln_fwd_cuda(p, nullptr);
  } catch (const std::invalid_argument& e) {
    threw = std::string(e.what()).find("mod_dtype") != std::string::npos;
  }
  AL_CHECK(threw, "mod_dtype f16 with bf16 x must throw");
  p = pr.params();
  AL_CHECK(adaln_bwd_cuda_workspace_bytes(p) > 0, "per-sample backward needs a workspace");
  threw = false;
  try {
    adaln_bwd_cuda(p, nullptr);  // workspace null
  } catch (const std::invalid_argument& e) {
    threw = std::string(e.what()).find("workspace") != std::string::npos;
  }
  AL_CHECK(threw, "missing workspace must throw naming workspace");
  p.per_token = true;
  p.dweight = p.dbias = nullptr;
  AL_CHECK(adaln_bwd_cuda_workspace_bytes(p) == 0, "per-token without weight needs no workspace");
}

// Params with the shape of a case and dummy non-null pointers: enough for
// adaln_bwd_cuda_plan and adaln_bwd_cuda_workspace_bytes, which size but never read.
AdalnParams plan_params(const AdalnCase& c) {
  static char dummy[16];
  AdalnParams p = c.shape_params();
  p.x = p.scale = p.shift = p.dy = dummy;
  p.dx = p.dscale = p.dshift = dummy;
  p.mean = p.rstd = reinterpret_cast<float*>(dummy);
  if (c.weight) p.weight = p.dweight = dummy;
  if (c.bias) p.bias = p.dbias = dummy;
  adaln_set_contiguous_strides(p);
  return p;
}

// Every D from a list of primes, powers of two and their neighbours, per-sample (3
// samples) and per-token, with and without weight / bias. Up to 8192 a row sits in the
// registers of one team; above it the looped kernels run (one case per D and few rows, so
// the emulated run stays short). Past 8192 columns the backward's accumulators live in
// the workspace instead of registers.
void test_dims() {
  const auto cs = combos();
  const std::vector<int64_t> dims = {1,    2,    3,    5,    8,    13,   31,   32,
                                     61,   127,  257,  509,  769,  1021, 2039, 2048,
                                     4093, 4096, 4099, 6007, 8179, 8191, 8192};
  const std::vector<int64_t> wide =
      g_small ? std::vector<int64_t>{16411}
              : std::vector<int64_t>{8193, 8209, 12288, 12289, 16381, 16384, 16411, 20011};
  uint64_t seed = 900;
  auto check = [&](const AdalnCase& c) {
    auto r = adaln_check::check_adaln_fwd(c, run_fwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
    r = adaln_check::check_adaln_bwd(c, run_bwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
  };
  for (size_t i = 0; i < dims.size(); ++i)
    for (size_t k = 0; k < (g_small ? 1u : 2u); ++k)
      check(shaped(cs[(i * 5 + k * 7) % cs.size()], 3, g_small ? 2 : 5, dims[i], seed++));
  for (size_t i = 0; i < wide.size(); ++i)
    check(shaped(cs[(i * 5 + 3) % cs.size()], g_small ? 1 : 3, 2, wide[i], seed++));
  // D 4097 - 8192: one vector a thread in teams of up to 1024 (the wide kernels), but for
  // the affine backward (two vectors in teams of up to 512).
  for (int64_t D : {int64_t(4097), int64_t(8192)})
    for (size_t combo : {size_t(4), size_t(5)}) {
      const AdalnCudaBwdPlan pl = adaln_bwd_cuda_plan(plan_params(shaped(cs[combo], 2, 4, D, 1)));
      const bool affine = cs[combo].weight;
      const int team = int(affine ? ((D + 15) / 16 + 31) / 32 * 32 : ((D + 7) / 8 + 31) / 32 * 32);
      AL_CHECK(pl.team == team && pl.vectors_per_thread == (affine ? 2 : 1),
               "D = " << D << (affine ? " affine" : "") << ": team " << pl.team << " x "
                      << pl.vectors_per_thread << " vectors, expected " << team);
    }
}

// Misaligned tensors and D % 8 != 0: every tensor `shift` elements past an aligned address
// and rows padded to a multiple of 16 bytes (the vector path for the aligned bulk, the
// ragged path for the head and the tail), or row strides that break the 16-byte phase
// (all ragged). Under the emulator's UBSan build a vector access off 16 bytes is an error.
void test_ragged() {
  const auto cs = combos();
  struct R {
    int64_t D, pad;
    int shift;
  };
  // pad: stride D + pad, a multiple of 8 elements (16 bytes of 16-bit data, 32 of fp32)
  const std::vector<R> full = {{1500, 4, 3}, {1500, 4, 0}, {1536, 0, 5}, {1027, 5, 1},
                               {13, 3, 7},   {5, 3, 6},    {4099, 5, 2}, {8192, 0, 3},
                               {1500, 3, 3}, {8209, 7, 4}};
  const std::vector<R> small = {{1500, 4, 3}, {13, 3, 7}, {8192, 0, 3}};
  uint64_t seed = 1300;
  size_t i = 0;
  for (const R& t : g_small ? small : full) {
    for (size_t k = 0; k < (g_small ? 1u : 2u); ++k, ++i) {
      const AdalnCase c =
          shaped(cs[(i * 3 + 1) % cs.size()], 2, g_small ? 2 : 5, t.D, seed++, t.pad);
      const int sh = t.shift;
      auto r = adaln_check::check_adaln_fwd(
          c, [sh](const AdalnParams& p) { cuda_testing::run_fwd_cuda_shifted(p, sh); });
      AL_CHECK(r.ok, c.name() << " shift " << sh << "\n" << r.report);
      r = adaln_check::check_adaln_bwd(
          c, [sh](const AdalnParams& p) { cuda_testing::run_bwd_cuda_shifted(p, sh); });
      AL_CHECK(r.ok, c.name() << " shift " << sh << "\n" << r.report);
    }
  }
}

// Operands that disagree on where their rows reach 16 bytes: only the odd ones move element
// by element, the rest 128 bits at a time (x alone shifted: dy and dx still vectors in the
// backward, x on a tie in the forward; x alone aligned, with per-token modulation: y and
// the modulation win). Against the reference; the layout from adaln_cuda_row_layout with
// the same device pointers. D leaves the team a spare vector for the head (not so for D a
// multiple of 8 x the team's vectors, e.g. 1536: see docs/kernels.md).
void test_row_layout() {
  const auto cs = combos();
  struct L {
    size_t combo;
    int64_t D;
    int shift, x_shift;         // x_shift < 0: x shifted like the rest
    unsigned fwd_ops, bwd_ops;  // wanted among the vector operands
    unsigned fwd_not, bwd_not;  // wanted element by element
  };
  const unsigned X = kAdalnOpX, Y = kAdalnOpY, DY = kAdalnOpDy, DX = kAdalnOpDx;
  const unsigned S = kAdalnOpScale, DS = kAdalnOpDscale;
  const std::vector<L> full = {{5, 1500, 2, 0, X, DY | DX, Y, X},
                               {13, 1000, 0, 3, X, DY | DX, Y, X},
                               {9, 4099, 0, 5, X, DY | DX, Y, X},
                               {7, 1000, 3, -1, X | Y | S, X | DY | DX | S | DS, 0, 0},
                               {11, 6000, 0, 2, Y | S, DY | DX | S | DS, X, X}};
  const std::vector<L> small = {{13, 1000, 0, 3, X, DY | DX, Y, X},
                                {11, 6000, 0, 2, Y | S, DY | DX | S | DS, X, X}};
  uint64_t seed = 2100;
  for (const L& t : g_small ? small : full) {
    const int64_t pad = (8 - t.D % 8) % 8;  // 16-byte rows of 16-bit data
    const AdalnCase c = shaped(cs[t.combo], 2, g_small ? 2 : 5, t.D, seed++, pad);
    for (bool bwd : {false, true}) {
      AdalnProblem pr(c);
      cuda_testing::DeviceMirror m(pr.params(), bwd, t.shift, t.x_shift);
      const AdalnCudaRowLayout lo = adaln_cuda_row_layout(m.dp, bwd);
      const unsigned want = bwd ? t.bwd_ops : t.fwd_ops, no = bwd ? t.bwd_not : t.fwd_not;
      AL_CHECK((lo.vector_operands & want) == want && (lo.vector_operands & no) == 0,
               c.name() << (bwd ? " backward" : " forward") << " shift " << t.shift << " x "
                        << t.x_shift << ": vector operands 0x" << std::hex << lo.vector_operands
                        << std::dec);
    }
    const int sh = t.shift, xs = t.x_shift;
    auto r = adaln_check::check_adaln_fwd(
        c, [sh, xs](const AdalnParams& p) { cuda_testing::run_fwd_cuda_shifted(p, sh, xs); });
    AL_CHECK(r.ok, c.name() << " shift " << sh << " x " << xs << "\n" << r.report);
    r = adaln_check::check_adaln_bwd(
        c, [sh, xs](const AdalnParams& p) { cuda_testing::run_bwd_cuda_shifted(p, sh, xs); });
    AL_CHECK(r.ok, c.name() << " shift " << sh << " x " << xs << "\n" << r.report);
  }
}

// The grid is sized from the device (occupancy x SMs) and the rows are cut into one chunk
// a block: on a device of one SM (the emulator's set_sms; a real GPU runs the same cases
// with its own size) every block walks many rows, the looped backward adds rows past its
// first into the workspace rows, a per-sample chunk ends at its sample's last row, and the
// forward loads each row ahead while it reduces the one before.
void test_few_sms() {
#ifdef __CUDA_EMU__
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cuda_emu::set_sms(1);
#endif
  const auto cs = combos();
  struct F {
    size_t combo;
    int64_t B, L, D;
  };
  // D = 1024 and 512 with 16-byte rows: the forward's prefetch of the team's next row
  // (the vector path) over many rows a team.
  const std::vector<F> full = {
      {3, 1, 24, 16411}, {7, 1, 24, 16411}, {4, 3, 7, 12289}, {11, 2, 300, 1500}, {1, 5, 100, 64},
      {9, 1, 2000, 8},   {5, 1, 600, 1024}, {7, 2, 200, 512}, {4, 3, 50, 6000},   {6, 1, 70, 8192}};
  const std::vector<F> small = {
      {3, 1, 10, 16411}, {11, 2, 40, 1500}, {5, 1, 200, 1024}, {4, 3, 20, 6000}};
  uint64_t seed = 1500;
  for (const F& t : g_small ? small : full) {
    const AdalnCase c = shaped(cs[t.combo % cs.size()], t.B, t.L, t.D, seed++);
    auto r = adaln_check::check_adaln_fwd(c, run_fwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
    r = adaln_check::check_adaln_bwd(c, run_bwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
  }
  // More chunks than blocks, several samples: a block's grid-stride step crosses into a
  // later sample part-way through it (the walk's carry, ChunkWalk). The first shape of the
  // list that does (on one emulated SM: the wide kernels, two blocks an SM, 256 rows a
  // chunk; a GPU's many SMs would need far more rows).
  bool carried = false;
  for (const F& t : std::vector<F>{{4, 3, 700, 4500}, {4, 5, 700, 4500}, {4, 3, 1100, 4500}}) {
    const AdalnCase c = shaped(cs[t.combo], t.B, t.L, t.D, seed++);
    const AdalnCudaBwdPlan pl = adaln_bwd_cuda_plan(plan_params(c));
    const int64_t G = pl.blocks, K = pl.chunks, cps = K / t.B;
    for (int64_t b = 0; b < G && b + G < K && K % t.B == 0; ++b)
      carried = carried || (b % cps + G % cps >= cps);
    if (!carried) continue;
    auto r = adaln_check::check_adaln_fwd(c, run_fwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
    r = adaln_check::check_adaln_bwd(c, run_bwd_cuda);
    AL_CHECK(r.ok, c.name() << " (" << K << " chunks, " << G << " blocks)\n" << r.report);
    break;
  }
#ifdef __CUDA_EMU__
  AL_CHECK(carried, "no shape of the list steps a block across a sample part-way");
  cuda_emu::set_sms(sms);
#endif
}

// The backward's one-launch finalize on each of its paths, every case with more than one
// segment (blocks add their segment, the last block of a column tile adds the segments):
// per-token with many chunks of few rows each (mode 0), per-sample with several whole
// samples a segment (mode 1, with and without dweight / dbias), per-sample with few samples
// of many chunks, cut into segments within a sample (mode 2); D = 1 and a partial column
// tile (D = 33); against the reference.
void test_finalize() {
  const auto cs = combos();
  struct F {
    size_t combo;
    int64_t B, L, D;
    int mode;
  };
  const std::vector<F> full = {{7, 1, 2000, 40, 0},  {3, 2, 700, 33, 0},  {11, 1, 6000, 1, 0},
                               {5, 40, 40, 64, 1},   {16, 40, 70, 64, 1}, {1, 2, 2100, 64, 2},
                               {12, 2, 2100, 64, 2}, {9, 1, 4000, 33, 2}};
  const std::vector<F> small = {{7, 1, 2000, 40, 0}, {5, 40, 40, 64, 1}, {1, 2, 2100, 64, 2}};
  uint64_t seed = 1700;
  for (const F& t : g_small ? small : full) {
    const AdalnCase c = shaped(cs[t.combo], t.B, t.L, t.D, seed++);
    const AdalnCudaBwdPlan pl = adaln_bwd_cuda_plan(plan_params(c));
    AL_CHECK(pl.finalize_mode == t.mode && pl.finalize_segments > 1,
             c.name() << ": finalize mode " << pl.finalize_mode << " with " << pl.finalize_segments
                      << " segments, expected mode " << t.mode << " with more than one");
    const auto r = adaln_check::check_adaln_bwd(c, run_bwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
  }
}

// The plan only (no launch): partial-sum traffic next to x + dy + dx and finalize blocks
// at Wan 1.3B 480p (32,760 x 1,536) and an image-sized input (1,560 x 1,536), bf16,
// per-sample affine: partials at most 1/8 of the row traffic when there are rows enough for
// 22 a chunk on every SM, and under 30 % for the image (one chunk an SM; 67 % before); at
// least two finalize blocks an SM (48 column tiles alone would leave most SMs idle).
void test_partial_traffic() {
  int sms = 132;
#ifdef __CUDA_EMU__
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
#endif
  for (bool tok : {false, true})
    for (int64_t N : {int64_t(32760), int64_t(1560)}) {
      AdalnCase c = shaped(combos()[tok ? 7 : 5], 1, N, 1536, 1);
      const AdalnCudaBwdPlan pl = adaln_bwd_cuda_plan(plan_params(c));
      const double rows = double(N) * 1536 * (3 * 2 + (tok ? 3 * 4 : 0));
      const double share = double(pl.partial_bytes) / rows;
      AL_CHECK(share <= (N >= 22 * sms ? 0.125 : 0.3), c.name() << ": partial traffic " << share
                                                                << " of x + dy + dx, " << pl.chunks
                                                                << " chunks");
      AL_CHECK(pl.finalize_blocks >= 2 * sms,
               c.name() << ": " << pl.finalize_blocks << " finalize blocks for " << sms << " SMs");
    }
}

// Per-sample modulation with short samples (L smaller than the chunk a block would take):
// chunks of whole samples, one team a sample, which writes the sample's dscale / dshift
// itself; one pair of partial rows a chunk for dweight / dbias. B = 4096, L = 1 with small
// teams (32 a block), several samples a team (L = 2), samples of 3 rows, dscale / dshift
// only (no workspace), two vectors a thread with 56 KiB of shared memory (D = 7000: the
// opt-in above 48 KiB), against the reference; then the plan alone at B = 4096, L = 1,
// D = 8192 bf16 affine: the workspace a fraction of x (was 512 MiB for 64 MiB of x).
void test_sample_teams() {
  const auto cs = combos();
  struct S {
    size_t combo;
    int64_t B, L, D;
  };
  const std::vector<S> full = {{5, 4096, 1, 64}, {17, 2000, 2, 200}, {9, 1000, 3, 64},
                               {0, 1500, 1, 40}, {1, 300, 1, 7000},  {12, 700, 1, 1500},
                               {4, 300, 2, 5000}};
  const std::vector<S> small = {{5, 1024, 1, 64}, {17, 500, 2, 200}};
  uint64_t seed = 1900;
  for (const S& t : g_small ? small : full) {
    const AdalnCase c = shaped(cs[t.combo], t.B, t.L, t.D, seed++);
    const AdalnCudaBwdPlan pl = adaln_bwd_cuda_plan(plan_params(c));
    AL_CHECK(pl.samples_per_chunk > 0 && pl.chunks < t.B, c.name() << ": " << pl.samples_per_chunk
                                                                   << " samples a chunk, "
                                                                   << pl.chunks << " chunks");
    auto r = adaln_check::check_adaln_fwd(c, run_fwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
    r = adaln_check::check_adaln_bwd(c, run_bwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
  }
  const AdalnCase big = shaped(cs[5], 4096, 1, 8192, 1);
  const AdalnParams bp = plan_params(big);
  const double ws = double(adaln_bwd_cuda_workspace_bytes(bp)), x = 4096.0 * 8192 * 2;
  AL_CHECK(ws <= x / 4, big.name() << ": workspace " << ws / (1 << 20) << " MiB for "
                                   << x / (1 << 20) << " MiB of x");
  const AdalnCudaBwdPlan pl = adaln_bwd_cuda_plan(bp);
  AL_CHECK(pl.samples_per_chunk > 0 && pl.blocks > 1, big.name() << ": " << pl.blocks << " blocks");
}

// Segment-indexed modulation (cu_seqlens, the segment kernels): against the fp64 reference
// run per token on the modulation the segments expand to, dscale / dshift summed per segment
// (adaln_check). Segments of length 0 (first, between, last; all of them), 1 and many;
// n = 1; D from 1 to 16,384 incl. primes (one vector a thread up to 4096, then the block's
// team looping, the backward's sums past the first vector in the workspace); int32 and
// int64 offsets; small D (many teams a block: the teams' sums combined through shared
// memory). Then on one
// emulated SM (every block walks many chunks, long segments over many chunks, chunks of
// many pieces), the finalize's segments and tickets (many segments), and run-to-run bits.
void test_segments() {
  std::vector<AdalnCase> cs;
  for (const AdalnCase& c : combos())
    if (!c.per_token) cs.push_back(c);
  const std::vector<std::vector<int64_t>> shapes = {
      {23}, {0, 5, 0, 1, 30, 0}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {3, 0, 1, 90, 2, 41}};
  const std::vector<int64_t> dims =
      g_small
          ? std::vector<int64_t>{13, 1536, 16384}
          : std::vector<int64_t>{1, 2, 7, 13, 64, 127, 257, 1023, 1536, 4099, 8191, 12289, 16384};
  uint64_t seed = 2500;
  auto check = [&](const AdalnCase& c) {
    auto r = adaln_check::check_adaln_fwd(c, run_fwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
    r = adaln_check::check_adaln_bwd(c, run_bwd_cuda);
    AL_CHECK(r.ok, c.name() << "\n" << r.report);
  };
  auto seg = [&](size_t combo, std::vector<int64_t> lens, int64_t D, bool i64) {
    AdalnCase c = shaped(cs[combo % cs.size()], 1, 1, D, seed++);
    c.segments = std::move(lens);
    c.seg_i64 = i64;
    return c;
  };
  for (size_t i = 0; i < dims.size(); ++i)
    for (size_t k = 0; k < shapes.size(); ++k) {
      if ((g_small && k != (i + 1) % shapes.size()) || (dims[i] > 4099 && k == 3)) continue;
      check(seg(i * 4 + k, shapes[k], dims[i], (i + k) % 2 == 0));
    }
  // The plan: the segment kernels' finalize, and a workspace of chunks + n - 1 slot pairs.
  const AdalnCase pc = seg(1, {0, 40, 0, 300, 5}, 1536, true);
  AdalnParams pp = plan_params(pc);
  pp.cu_seqlens = &pp;  // a non-null pointer: the plan never reads the offsets
  const AdalnCudaBwdPlan pl = adaln_bwd_cuda_plan(pp);
  AL_CHECK(pl.finalize_mode == 3 && pl.partial_bytes == 2 * 2 * (pl.chunks + 4) * 1536 * 4,
           "segments: finalize mode " << pl.finalize_mode << ", " << pl.chunks << " chunks, "
                                      << pl.partial_bytes << " partial bytes");
  check(seg(1, {0, 0, 0}, 40, true));  // no rows: every segment's dscale / dshift zero
  if (g_small) return;
  // The finalize cut into segments (many cu_seqlens segments, dweight / dbias: tickets).
  std::vector<int64_t> many;
  for (int i = 0; i < 300; ++i) many.push_back(i % 7 == 3 ? 0 : 1 + i % 5);
  check(seg(1, many, 64, true));
  check(seg(4, many, 33, false));
#ifdef __CUDA_EMU__
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cuda_emu::set_sms(1);
#endif
  // One SM: a block walks many chunks; segments over many chunks and chunks of many pieces.
  check(seg(5, {700, 0, 3, 1, 1, 400, 0}, 64, true));
  check(seg(3, {1, 600, 2, 0, 250}, 1500, false));
  check(seg(1, {0, 90, 1, 40}, 6000, true));
  check(seg(7, {30, 0, 17}, 12289, true));
#ifdef __CUDA_EMU__
  cuda_emu::set_sms(sms);
#endif
  // Run to run: the same bits.
  const AdalnCase dc = seg(3, {0, 411, 1, 0, 900, 2, 300}, 1536, true);
  std::vector<unsigned char> first;
  for (int run = 0; run < 2; ++run) {
    AdalnProblem pr(dc);
    run_fwd_cuda(pr.params());
    run_bwd_cuda(pr.params());
    if (run == 0)
      first = outputs(pr);
    else
      AL_CHECK(outputs(pr) == first, dc.name() << ": run 1 differs from run 0");
  }
}

// A CUDA error left pending by earlier work is reported as such, not as an adaLN launch
// failure, and does not fail the next call.
void test_pending_error() {
  AdalnCase c = shaped(combos()[1], 1, 4, 16, 1);
  AdalnProblem pr(c);
  cuda_testing::DeviceMirror m(pr.params(), false);
  int n = 0;
  cudaGetDeviceCount(&n);
  cudaSetDevice(n + 7);  // fails, leaving the error pending
  std::string msg;
  try {
    adaln_fwd_cuda(m.dp, nullptr);
  } catch (const std::runtime_error& e) {
    msg = e.what();
  }
  AL_CHECK(msg.find("earlier") != std::string::npos,
           "pending error not reported as earlier: '" << msg << "'");
  bool ok = true;
  try {
    adaln_fwd_cuda(m.dp, nullptr);
    m.copy_back();
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  AL_CHECK(ok, "the call after a reported pending error failed: " << msg);
}

struct CudaTest {
  const char* name;
  void (*fn)();
  bool needs_device;
};
const CudaTest kTests[] = {
    {"cuda_limits", test_cuda_limits, false},
    {"matrix_fwd", test_matrix_fwd, true},
    {"matrix_bwd", test_matrix_bwd, true},
    {"determinism", test_determinism, true},
    {"nan_rows", test_nan_rows, true},
    {"empty", test_empty, true},
    {"many_blocks", test_many_blocks, true},
    {"dims", test_dims, true},
    {"ragged", test_ragged, true},
    {"row_layout", test_row_layout, true},
    {"few_sms", test_few_sms, true},
    {"finalize", test_finalize, true},
    {"partial_traffic", test_partial_traffic, true},
    {"sample_teams", test_sample_teams, true},
    {"segments", test_segments, true},
    {"pending_error", test_pending_error, true},
};

// Names the test in ctest's listing (gtest finds it by ADL) instead of a byte dump.
[[maybe_unused]] void PrintTo(const CudaTest& t, std::ostream* os) { *os << t.name; }

}  // namespace

#ifdef AL_CUDA_TEST_GTEST
#include <gtest/gtest.h>

class AdalnCuda : public testing::TestWithParam<CudaTest> {};

TEST_P(AdalnCuda, Run) {
  const CudaTest& t = GetParam();
  std::string why;
  if (t.needs_device && !cuda_testing::have_device(&why))
    GTEST_SKIP() << "no usable CUDA device: " << why;
  const int before = g_failures;
  t.fn();
  EXPECT_EQ(g_failures, before) << t.name << " had failed checks (see above)";
}

INSTANTIATE_TEST_SUITE_P(adaln, AdalnCuda, testing::ValuesIn(kTests),
                         [](const testing::TestParamInfo<CudaTest>& i) {
                           return std::string(i.param.name);
                         });

// gtest's flags plus `--small` (the reduced matrix, as in the standalone build).
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--small") == 0) g_small = true;
  return RUN_ALL_TESTS();
}

#else

int main(int argc, char** argv) {
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--filter=", 9) == 0) filter = argv[i] + 9;
    if (std::strcmp(argv[i], "--small") == 0) g_small = true;
  }
  std::string why;
  const bool dev = cuda_testing::have_device(&why);
  if (!dev) std::printf("no usable CUDA device (%s): device tests are skipped\n", why.c_str());
  int failed = 0;
  for (const CudaTest& t : kTests) {
    if (!filter.empty() && std::string(t.name).find(filter) == std::string::npos) continue;
    if (t.needs_device && !dev) {
      std::printf("SKIP %s\n", t.name);
      continue;
    }
    const int before = g_failures;
    try {
      t.fn();
    } catch (const std::exception& e) {
      ++g_failures;
      std::printf("  exception: %s\n", e.what());
    }
    const bool ok = g_failures == before;
    failed += ok ? 0 : 1;
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", t.name);
    std::fflush(stdout);
  }
  std::printf("%s: %d test group(s) failed\n", failed ? "FAILED" : "OK", failed);
  return failed ? 1 : 0;
}

#endif
