// Optimised CPU path of the fused adaLN forward and backward: the driver.
//
// Threads (OpenMP) own contiguous row ranges (forward) or contiguous ranges of fixed row
// chunks (backward); within a row, SIMD over D by the row kernels of the path chosen at run
// time (adaln_cpu_paths.h; AVX-512, AVX2 or scalar, see simd_dispatch_cpu.cpp). This file is
// compiled for the baseline target and holds no vector code.
//
// Backward reductions (dscale / dshift over the rows of a sample, dweight / dbias over all
// rows) are accumulated per chunk of rows in fp32 by the row kernels, written to one partial
// row per chunk, and summed in chunk order by a finalize step here. Chunks depend only on
// (N, D, L) or the segments, never on the thread count or timing, so the results are
// bit-identical for any OMP_NUM_THREADS.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "adaptiveload/kernels/adaln.h"
#include "adaptiveload/kernels/adaln_cpu_paths.h"
#include "adaptiveload/kernels/half_types.h"
#include "adaptiveload/kernels/simd_dispatch_cpu.h"

namespace adaptiveload {
namespace {

using adaln_cpu::BwdShared;
using adaln_cpu::FwdShared;
using adaln_cpu::kMaxLanes;
using adaln_cpu::RowKernels;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

const RowKernels& kernels_for(CpuSimd path) {
  static const RowKernels scalar = adaln_cpu::scalar_kernels();
  static const RowKernels avx2 = adaln_cpu::avx2_kernels();
  static const RowKernels avx512 = adaln_cpu::avx512_kernels();
  if (!cpu_simd_supported(path))
    throw std::invalid_argument(std::string("adaln CPU SIMD path ") + cpu_simd_name(path) +
                                " is not supported by this CPU or build; pass a path for which "
                                "cpu_simd_supported() is true, or call the dispatching overload");
  return path == CpuSimd::Avx512 ? avx512 : path == CpuSimd::Avx2 ? avx2 : scalar;
}

// fp32 copy of an optional [D] vector (weight / bias), padded with zeros for full-width
// loads of any path; `fill` is used when the pointer is null.
std::vector<float> to_f32_vec(const void* p, DType t, int64_t D, float fill) {
  std::vector<float> out(size_t(round_up(D, kMaxLanes) + kMaxLanes), 0.f);
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

// Rows per reduction chunk: a function of D only (about 128K elements per chunk), so the
// partition, and with it every rounding, is independent of the thread count.
int64_t chunk_rows(int64_t D) {
  return std::clamp<int64_t>(131072 / std::max<int64_t>(D, 1), 8, 1024);
}

void fwd(const AdalnParams& p, const RowKernels& k) {
  const int64_t N = p.rows, D = p.dim;
  const std::vector<float> wv = to_f32_vec(p.weight, p.weight_dtype, D, 1.f);
  const std::vector<float> bv = to_f32_vec(p.bias, p.weight_dtype, D, 0.f);
  FwdShared sh;
  sh.p = &p;
  sh.w = wv.data();
  sh.b = bv.data();
  sh.affine = p.weight != nullptr || p.bias != nullptr;
#pragma omp parallel if (N * D > 16384)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    k.fwd_rows(sh, N * tid / nt, N * (tid + 1) / nt);
  }
}

void bwd(const AdalnParams& p, const RowKernels& k) {
  const int64_t N = p.rows, D = p.dim;
  const std::vector<float> wv = to_f32_vec(p.weight, p.weight_dtype, D, 1.f);
  const std::vector<float> bv = to_f32_vec(p.bias, p.weight_dtype, D, 0.f);
  BwdShared sh;
  sh.p = &p;
  sh.w = wv.data();
  sh.b = bv.data();
  sh.has_w = p.weight != nullptr;
  sh.affine = sh.has_w || p.bias != nullptr;
  sh.mod_partials = !p.per_token && (p.dscale != nullptr || p.dshift != nullptr);
  sh.wb_partials = p.dweight != nullptr || p.dbias != nullptr;

  // Chunks never straddle a sample (segment), so a chunk's dscale / dshift partial has one
  // owner: group g's rows in chunks of C from its first row (a per-sample batch is the case
  // of uniform segments; per-token, one group of all rows).
  const int64_t C = chunk_rows(D);
  const int64_t groups = p.per_token ? (N > 0 ? 1 : 0) : p.batch;
  std::vector<int64_t> group_chunks(size_t(groups + 1), 0);
  std::vector<adaln_cpu::Chunk> chunks;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t g0 = p.per_token ? 0 : adaln_cpu::segment_begin(p, g);
    const int64_t g1 = p.per_token ? N : adaln_cpu::segment_begin(p, g + 1);
    for (int64_t r = g0; r < g1; r += C) chunks.push_back({g, r, std::min(r + C, g1)});
    group_chunks[size_t(g + 1)] = int64_t(chunks.size());
  }
  sh.chunks = chunks.data();
  sh.group_chunks = group_chunks.data();
  const int64_t K = int64_t(chunks.size());
  // Partial sums [slot][K][D]: slot 0 dscale, 1 dshift, 2 dweight, 3 dbias.
  const int64_t nslots = sh.wb_partials ? 4 : (sh.mod_partials ? 2 : 0);
  std::vector<float> part(size_t(nslots * K * D));
  sh.ps = part.data();
  sh.pt = sh.ps + K * D;
  sh.pw = sh.ps + 2 * K * D;
  sh.pb = sh.ps + 3 * K * D;
  const float* ps = sh.ps;
  const float* pt = sh.pt;
  const float* pw = sh.pw;
  const float* pb = sh.pb;

#pragma omp parallel if (N * D > 16384)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    k.bwd_chunks(sh, K * tid / nt, K * (tid + 1) / nt);
  }

  // Finalize: each output column sums its chunks in chunk order (deterministic).
  auto finalize = [&](const float* part_slot, int64_t g0, int64_t nchunks, auto* out) {
    using TO = std::remove_pointer_t<decltype(out)>;
    std::vector<float> s(static_cast<size_t>(D), 0.f);
    for (int64_t c = g0; c < g0 + nchunks; ++c) {
      const float* row = part_slot + c * D;
      for (int64_t j = 0; j < D; ++j) s[j] += row[j];
    }
    for (int64_t j = 0; j < D; ++j) out[j] = from_float<TO>(s[j]);
  };
  // dscale / dshift row b ([B, D], mod_dtype) from sample (segment) b's chunks; zero for an
  // empty segment.
  auto fin_mod = [&](const float* slot, void* out, int64_t stride, int64_t b) {
    if (out == nullptr) return;
    const int64_t k0 = group_chunks[size_t(b)], nk = group_chunks[size_t(b + 1)] - k0;
    if (p.mod_dtype == DType::F32)
      finalize(slot, k0, nk, static_cast<float*>(out) + b * stride);
    else if (p.mod_dtype == DType::BF16)
      finalize(slot, k0, nk, static_cast<bf16_t*>(out) + b * stride);
    else
      finalize(slot, k0, nk, static_cast<f16_t*>(out) + b * stride);
  };
  if (!p.per_token) {
#pragma omp parallel for schedule(static) if (p.batch * D > 16384)
    for (int64_t b = 0; b < p.batch; ++b) {
      fin_mod(ps, p.dscale, p.dscale_stride, b);
      fin_mod(pt, p.dshift, p.dshift_stride, b);
    }
  }
  if (sh.wb_partials) {
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

}  // namespace

void adaln_fwd_cpu(const AdalnParams& p, CpuSimd path) {
  validate(p, AdalnPass::Fwd);
  validate_segments(p);
  const RowKernels& k = kernels_for(path);
  if (p.rows == 0) return;
  fwd(p, k);
}

void adaln_bwd_cpu(const AdalnParams& p, CpuSimd path) {
  validate(p, AdalnPass::Bwd);
  validate_segments(p);
  bwd(p, kernels_for(path));
}

void adaln_fwd_cpu(const AdalnParams& p) { adaln_fwd_cpu(p, adaln_cpu_simd()); }
void adaln_bwd_cpu(const AdalnParams& p) { adaln_bwd_cpu(p, adaln_cpu_simd()); }

}  // namespace adaptiveload
