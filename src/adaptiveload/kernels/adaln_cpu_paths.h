// Internal interface between the optimised CPU adaLN driver (adaln_cpu.cpp: validation,
// threads, the deterministic chunk partition, the finalize of the backward reductions) and
// its per-instruction-set row kernels (adaln_cpu_rows.h, compiled once per path in
// adaln_cpu_{scalar,avx2,avx512}.cpp). The driver is compiled for the baseline target and
// calls a path's kernels only after cpu_simd_supported() said this CPU runs them.
#pragma once

#include <cstdint>

#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {
namespace adaln_cpu {

// Widest vector of any path (AVX-512: 16 fp32); the shared fp32 vectors below are padded
// with zeros to round_up(D, kMaxLanes) + kMaxLanes, enough for a full-width load at any j < D.
constexpr int64_t kMaxLanes = 16;

// The sample or segment of [B, D] modulation that rows belong to: segment s is rows
// [segment_begin(s), segment_begin(s + 1)), B uniform samples of L rows or, with cu_seqlens,
// n segments of any lengths (a per-sample batch is the special case of uniform segments).
inline int64_t segment_begin(const AdalnParams& p, int64_t s) {
  return p.cu_seqlens ? adaln_cu_seqlen(p, s) : s * p.rows_per_sample;
}
// The segment holding row r (0 <= r < rows; empty segments hold none).
inline int64_t segment_of(const AdalnParams& p, int64_t r) {
  return p.cu_seqlens ? adaln_segment_of(p, r) : r / p.rows_per_sample;
}

// Read-only inputs of one forward call, shared by all threads.
struct FwdShared {
  const AdalnParams* p = nullptr;
  const float* w = nullptr;  // [padded D] fp32 weight, 1 where absent
  const float* b = nullptr;  // [padded D] fp32 bias, 0 where absent
  bool affine = false;       // weight or bias present
};

// A chunk of the backward: rows [r0, r1) of one group (a sample or segment; all rows when
// per_token), whose reductions over rows it sums into one partial row per reduction.
struct Chunk {
  int64_t group = 0, r0 = 0, r1 = 0;
};

// One backward call: inputs, the chunk partition and the partial-sum rows it writes.
// Group g's rows are cut into chunks of C rows from its first row; its chunks are
// [group_chunks[g], group_chunks[g + 1]) (none for an empty segment).
struct BwdShared {
  const AdalnParams* p = nullptr;
  const float* w = nullptr;  // as in FwdShared
  const float* b = nullptr;
  bool has_w = false, affine = false;
  bool mod_partials = false;              // per-sample dscale / dshift wanted: write ps, pt
  bool wb_partials = false;               // dweight / dbias wanted: write pw, pb
  const Chunk* chunks = nullptr;          // [K]
  const int64_t* group_chunks = nullptr;  // [groups + 1]
  float* ps = nullptr;                    // [K, D] fp32 partials of dscale, dshift, dweight, dbias
  float* pt = nullptr;
  float* pw = nullptr;
  float* pb = nullptr;
};

// The row kernels of one path. fwd_rows does rows [r0, r1) (y, mean, rstd); bwd_chunks does
// chunks [k0, k1) (dx, per-token dscale / dshift, and the chunk partials). Both may run
// concurrently on disjoint ranges and end with a store fence (non-temporal stores).
struct RowKernels {
  void (*fwd_rows)(const FwdShared& s, int64_t r0, int64_t r1) = nullptr;
  void (*bwd_chunks)(const BwdShared& s, int64_t k0, int64_t k1) = nullptr;
};

RowKernels scalar_kernels();
// Empty (null pointers) on a build for another architecture.
RowKernels avx2_kernels();
RowKernels avx512_kernels();

}  // namespace adaln_cpu
}  // namespace adaptiveload
