// Finalize of the fused adaLN backward: the backward kernel's chunk partials (two fp32
// [K, D] rows, S1 = sum g and S2 = sum g xhat over a chunk's rows) become
//
//   dshift = S1, dscale = w S2 + b S1                       (per sample, over its chunks)
//   dbias = sum_b (1 + s_b) S1_b, dweight = sum_b (1 + s_b) S2_b   (per-sample modulation)
//   dbias = sum S1, dweight = sum S2                        (per-token)
//
// in one launch, summed in a fixed order (the plan, fin_plan in adaln_launch_plan.h, depends
// only on the shape and the device model).
#include <cstdint>

#include "adaln_device.cuh"
#include "adaln_launch.cuh"

namespace adaptiveload {
namespace adaln_cuda {
namespace {

// ---------------------------------------------------------------- finalize (one launch)

// The backward's chunk partials (two fp32 [K, D] rows: S1 = sum g, S2 = sum g xhat over a
// chunk's rows) become dscale / dshift (per-sample) and dweight / dbias in one launch of
// adaln_finalize_kernel. Blocks of (32, 16) threads: 32 columns (coalesced) and 16 row
// phases combined in phase order. Grid (column tiles, segments): the rows to sum are cut
// into nseg segments, so there are enough blocks even for few columns; each block writes
// its segment's sums to [nseg, D] rows of the workspace and the last block of a column tile
// to finish (a ticket counter: the only atomic, it picks who adds, not the order) sums the
// segments in segment order. Deterministic: the plan (FinPlan) depends only on the shape
// and the device model. Modes:
//   kFinRows    per-token: segment s = chunk rows [s span, (s + 1) span); dbias = sum S1,
//               dweight = sum S2;
//   kFinSamples per-sample, few chunks a sample: segment s = samples [s span, (s + 1) span),
//               each summed by one thread of its column (its cps chunks in order) into
//               dshift = S1, dscale = w S2 + b S1; dbias = sum_b (1 + s_b) S1_b, dweight =
//               sum_b (1 + s_b) S2_b;
//   kFinSplit   per-sample, many chunks a sample (few samples): segment s = chunks
//               [j span, (j + 1) span) of sample s / nsg (j = s % nsg); the last block then
//               does the kFinSamples work over the segments (nsg rows a sample);
//   kFinSegments cu_seqlens: segment s = cu_seqlens segments [s span, (s + 1) span), in
//               order; segment g's partial slots, [k0 + g, k1 + g] for its chunks k0 .. k1
//               (adaln_seg_kernels.cuh), are summed by the block's 16 phases into dshift =
//               S1, dscale = w S2 + b S1, and (1 + scale_g) S1, (1 + scale_g) S2 added up
//               over the segments for dbias, dweight.

struct FinArgs {
  AdalnParams p;
  FinPlan f;
  int64_t K, cps, groups;  // chunks, chunks a sample, samples (1 per-token)
  int64_t chunk_rows;      // kFinSegments: rows a chunk (the segment kernels' grid)
  int64_t slots;           // rows of p1, p2
  const float *p1, *p2;    // [slots, D] chunk (piece) partials S1, S2
  float *q1, *q2;          // [nseg, D] segment sums (nseg > 1)
  unsigned* ticket;        // [ntiles], zeroed by the backward kernel (nseg > 1)
};

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Adds the two [16][33] phase tables of column threadIdx.x in phase order; every thread
// of the column gets the sums. All threads of the block call it together.
__device__ __forceinline__ void fin_combine(float (*sm)[16][33], float s1, float s2, float& t1,
                                            float& t2) {
  sm[0][threadIdx.y][threadIdx.x] = s1;
  sm[1][threadIdx.y][threadIdx.x] = s2;
  __syncthreads();
  t1 = t2 = 0.f;
  for (int i = 0; i < 16; ++i) t1 += sm[0][i][threadIdx.x], t2 += sm[1][i][threadIdx.x];
  __syncthreads();
}

// Column j of rows [k0, k1) of a and b, summed by 16 phases then in phase order. __ldcg:
// the segment rows were written by other blocks of this launch (not through this L1).
__device__ __forceinline__ void fin_rows(const float* a, const float* b, int64_t k0, int64_t k1,
                                         int64_t D, int64_t j, float (*sm)[16][33], float& t1,
                                         float& t2) {
  float s1 = 0.f, s2 = 0.f;
  if (j < D)
    for (int64_t k = k0 + threadIdx.y; k < k1; k += 16) {
      s1 += __ldcg(a + k * D + j);
      s2 += __ldcg(b + k * D + j);
    }
  fin_combine(sm, s1, s2, t1, t2);
}

// Samples [g0, g1), n rows each in a / b (sample g: rows g n .. g n + n - 1): the thread of
// phase (g - g0) % 16 sums sample g's rows in order, writes its dshift and dscale and adds
// (1 + scale_g) S1_g, (1 + scale_g) S2_g to its sums, combined over the phases into t1, t2.
__device__ __forceinline__ void fin_samples(const FinArgs& f, const float* a, const float* b,
                                            int64_t n, int64_t g0, int64_t g1, int64_t j,
                                            float (*sm)[16][33], float& t1, float& t2) {
  const AdalnParams& p = f.p;
  const int64_t D = p.dim;
  float m1 = 0.f, m2 = 0.f;
  if (j < D) {
    const float w = p.weight ? ld_any(p.weight, p.weight_dtype, j) : 1.f;
    const float bb = p.bias ? ld_any(p.bias, p.weight_dtype, j) : 0.f;
    const bool total = p.dweight || p.dbias;
    for (int64_t g = g0 + threadIdx.y; g < g1; g += 16) {
      float s1 = 0.f, s2 = 0.f;
      for (int64_t i = 0; i < n; ++i) {
        s1 += __ldcg(a + (g * n + i) * D + j);
        s2 += __ldcg(b + (g * n + i) * D + j);
      }
      if (p.dshift) st_any(p.dshift, p.mod_dtype, g * p.dshift_stride + j, s1);
      if (p.dscale) st_any(p.dscale, p.mod_dtype, g * p.dscale_stride + j, w * s2 + bb * s1);
      if (total) {
        const float sc = 1.f + ld_any(p.scale, p.mod_dtype, g * p.scale_stride + j);
        m1 += sc * s1;
        m2 += sc * s2;
      }
    }
  }
  fin_combine(sm, m1, m2, t1, t2);
}

// Segments [g0, g1) of cu_seqlens: each one's slots summed in slot order by the block's 16
// phases (fin_rows), its dshift and dscale written, and (1 + scale_g) S1_g, (1 + scale_g) S2_g
// added up into t1, t2 in segment order. An empty segment has no slots (zero). The slots are
// clamped to [0, slots): offsets that are not valid give wrong sums, never a bad read.
__device__ __forceinline__ void fin_segments(const FinArgs& f, int64_t g0, int64_t g1, int64_t j,
                                             float (*sm)[16][33], float& t1, float& t2) {
  const AdalnParams& p = f.p;
  const int64_t D = p.dim;
  const bool total = p.dweight || p.dbias;
  float w = 1.f, bb = 0.f;
  if (j < D) {
    if (p.weight) w = ld_any(p.weight, p.weight_dtype, j);
    if (p.bias) bb = ld_any(p.bias, p.weight_dtype, j);
  }
  float m1 = 0.f, m2 = 0.f;
  for (int64_t g = g0; g < g1; ++g) {  // uniform per block
    const int64_t b0 = cu_at(p, g), b1 = cu_at(p, g + 1);
    int64_t k0 = 0, k1 = 0;
    if (b1 > b0 && b0 >= 0) {
      k0 = min64(b0 / f.chunk_rows + g, f.slots);
      k1 = min64((b1 - 1) / f.chunk_rows + g + 1, f.slots);
    }
    float s1, s2;
    fin_rows(f.p1, f.p2, k0, k1, D, j, sm, s1, s2);
    if (threadIdx.y == 0 && j < D) {
      if (p.dshift) st_any(p.dshift, p.mod_dtype, g * p.dshift_stride + j, s1);
      if (p.dscale) st_any(p.dscale, p.mod_dtype, g * p.dscale_stride + j, w * s2 + bb * s1);
    }
    if (total && j < D) {
      const float sc = 1.f + ld_any(p.scale, p.mod_dtype, g * p.scale_stride + j);
      m1 += sc * s1;
      m2 += sc * s2;
    }
  }
  t1 = m1;
  t2 = m2;
}

__global__ void __launch_bounds__(kFinalizeThreads) adaln_finalize_kernel(const FinArgs f) {
  __shared__ float sm[2][16][33];
  __shared__ int last;
  const AdalnParams& p = f.p;
  const int64_t D = p.dim, j = int64_t(blockIdx.x) * 32 + threadIdx.x, s = blockIdx.y;
  const FinPlan& pl = f.f;
  float t1, t2;  // this segment's dbias, dweight sums (kFinSplit: its raw S1, S2)
  if (pl.mode == kFinRows) {
    fin_rows(f.p1, f.p2, s * pl.span, min64(f.K, (s + 1) * pl.span), D, j, sm, t1, t2);
  } else if (pl.mode == kFinSegments) {
    fin_segments(f, s * pl.span, min64(p.batch, (s + 1) * pl.span), j, sm, t1, t2);
    if (!p.dweight && !p.dbias) return;
  } else if (pl.mode == kFinSamples) {
    fin_samples(f, f.p1, f.p2, f.cps, s * pl.span, min64(f.groups, (s + 1) * pl.span), j, sm, t1,
                t2);
    if (!p.dweight && !p.dbias) return;
  } else {
    const int64_t g = s / pl.nsg, k0 = g * f.cps + (s - g * pl.nsg) * pl.span;
    fin_rows(f.p1, f.p2, k0, min64(k0 + pl.span, (g + 1) * f.cps), D, j, sm, t1, t2);
  }
  if (pl.nseg > 1) {
    if (threadIdx.y == 0 && j < D) f.q1[s * D + j] = t1, f.q2[s * D + j] = t2;
    __threadfence();  // the segment rows before the ticket
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0)
      last = atomicAdd(f.ticket + blockIdx.x, 1u) == unsigned(pl.nseg - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (pl.mode == kFinSplit)
      fin_samples(f, f.q1, f.q2, pl.nsg, 0, f.groups, j, sm, t1, t2);
    else
      fin_rows(f.q1, f.q2, 0, pl.nseg, D, j, sm, t1, t2);
  }
  if (threadIdx.y == 0 && j < D) {
    if (p.dbias) st_any(p.dbias, p.weight_dtype, j, t1);
    if (p.dweight) st_any(p.dweight, p.weight_dtype, j, t2);
  }
}

}  // namespace

void launch_finalize(const Args& a, const FinPlan& f, cudaStream_t st) {
  const AdalnParams& p = a.p;
  float* ws = static_cast<float*>(p.workspace);
  const int64_t q = a.off_q >= 0 ? a.off_q : 0, nq = a.off_q >= 0 ? f.nseg * p.dim : 0;
  const FinArgs fa{p,
                   f,
                   a.c.chunks,
                   a.c.chunks_per_group,
                   p.per_token ? 1 : p.batch,
                   a.c.chunk_rows,
                   partial_rows(p, a.c),
                   ws + a.off_t,
                   ws + a.off_s,
                   ws + q,
                   ws + q + nq,
                   a.off_k >= 0 ? reinterpret_cast<unsigned*>(ws + a.off_k) : nullptr};
  const dim3 grid(unsigned(f.ntiles), unsigned(f.nseg)), block(32, 16);
  adaln_finalize_kernel<<<grid, block, 0, st>>>(fa);
  check_launch("finalize kernel");
}

}  // namespace adaln_cuda
}  // namespace adaptiveload
