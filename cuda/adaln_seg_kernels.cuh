// Segment kernels of the fused adaLN op: x [N, D] is a packed batch of segments of any
// lengths (cu_seqlens [n + 1], device memory), and the rows of segment i use modulation row i
// of scale / shift [n, D]:
//
//   forward   y = ((x - mean) * rstd * w + b) * (1 + scale_i) + shift_i
//   backward  dx per row; S1 = sum dy, S2 = sum dy xhat over each piece of a segment, two
//             fp32 partial rows a piece in the workspace, which adaln_finalize_kernel
//             (kFinSegments) turns into dshift_i = S1, dscale_i = w S2 + b S1 per segment and
//             dbias / dweight = sum_i (1 + scale_i) S1_i / S2_i, in a fixed order.
//
// Work layout (make_layout / make_chunks): the rows are cut into chunks of C rows on one grid
// (chunk k = rows [k C, (k + 1) C)) that ignores the segments, because the host never reads
// cu_seqlens (it is device memory; reading it would synchronise). A block walks chunk k's
// pieces, the runs of its rows in one segment, in order (a binary search in cu_seqlens for
// the segment of the chunk's first row, then one step per segment boundary); the teams of the
// block take a piece's rows in turn, as a per-sample chunk's. Piece (k, s) writes partial
// slot k + s: two pieces never share one (a later chunk's pieces are in later or equal
// segments, so k + s grows with the piece's rows), and segment s's slots are the contiguous
// [k0 + s, k1 + s] of its chunks k0 .. k1: chunks + n - 1 slots in all, found by the finalize
// from cu_seqlens alone. A team of ts threads owns a row and loops over its vectors
// (v = lane, lane + ts, ...; any D, one kernel a dtype pair): its first vector stays in
// registers across the row's passes, the others are re-read (meant to hit L1 / L2, as the
// looped kernels' rows). More than one vector a thread happens only for D > 4096, where the
// team is the whole block (ts = 512): the backward's accumulators of those vectors are the
// piece's partial rows in the workspace (read-modify-write), as in adaln_bwd_loop_kernel.
// With offsets that are not ascending from 0 to N (the binding checks them) the results are
// wrong but every read stays inside cu_seqlens and every loop ends.
#pragma once

#include "adaln_device.cuh"

namespace adaptiveload {
namespace adaln_cuda {
namespace {

// The segment of row r: the last i of [0, n - 1] with cu_seqlens[i] <= r (empty segments
// hold no row). Binary search; always in [0, n - 1].
__device__ __forceinline__ int64_t seg_of_row(const AdalnParams& p, int64_t r) {
  int64_t lo = 0, hi = p.batch - 1;
  while (lo < hi) {
    const int64_t mid = lo + ((hi - lo + 1) >> 1);
    if (cu_at(p, mid) <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// A block's walk over the pieces of chunk rows [c0, c1): piece rows [r0, e) of segment s.
// Block-uniform (every thread reads the same offsets).
struct PieceWalk {
  int64_t s, r0, e, c1;
  __device__ PieceWalk(const AdalnParams& p, int64_t c0, int64_t c1_)
      : s(seg_of_row(p, c0)), r0(c0), e(c0), c1(c1_) {
    end_of(p);
  }
  __device__ bool done() const { return r0 >= c1; }
  __device__ void next(const AdalnParams& p) {
    r0 = e;
    if (r0 >= c1) return;
    while (s + 1 < p.batch && cu_at(p, s + 1) <= r0) ++s;  // past empty segments
    end_of(p);
  }
  // e = the end of segment s in the chunk (at least one row past r0: bad offsets move on).
  __device__ void end_of(const AdalnParams& p) {
    const int64_t n1 = s + 1 < p.batch ? cu_at(p, s + 1) : c1;
    e = n1 > c1 ? c1 : (n1 <= r0 ? r0 + 1 : n1);
  }
};

// ---------------------------------------------------------------- forward

template <typename T, typename TM>
__global__ void __launch_bounds__(kMaxTeam) adaln_fwd_seg_kernel(const Args a) {
  const AdalnParams& p = a.p;
  const Cfg& c = a.c;
  __shared__ float red[2][32][2];
  const int ts = c.team_size, team = threadIdx.x / ts, lane = threadIdx.x - team * ts;
  const int64_t D = p.dim, nvec = a.m.count, teams = c.teams_per_block;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const TM* scale = static_cast<const TM*>(p.scale);
  const TM* shift = static_cast<const TM*>(p.shift);
  const RowMap& rm = a.m;
  const VecPos vp0 = vec_pos(rm, lane);  // this thread's first vector, held in registers
  for (int64_t k = blockIdx.x; k < c.chunks; k += gridDim.x) {
    const int64_t c0 = k * c.chunk_rows;
    for (PieceWalk pw(p, c0, c0 + c.chunk_rows < p.rows ? c0 + c.chunk_rows : p.rows); !pw.done();
         pw.next(p)) {
      const int64_t s = pw.s;
      for (int64_t rb = pw.r0; rb < pw.e; rb += teams) {  // uniform per block
        const int64_t r = rb + team;
        const bool valid = r < pw.e;
        const T* xr = x + r * p.x_stride;
        float x0[kEpv];
        load_vec<T>(xr, rm, kOpX, vp0, valid, x0);
        float sm[1] = {0.f};
#pragma unroll
        for (int e = 0; e < kEpv; ++e) sm[0] += x0[e];
#pragma unroll 1
        for (int64_t v = lane + ts; valid && v < nvec; v += ts) {
          float xv[kEpv];
          load_vec<T>(xr, rm, kOpX, vec_pos(rm, v), true, xv);
#pragma unroll
          for (int e = 0; e < kEpv; ++e) sm[0] += xv[e];
        }
        team_sum<1>(sm, ts, reinterpret_cast<float(*)[32][1]>(red), 0);
        const float m = sm[0] / float(D);
        float q[2] = {0.f, 0.f};  // sum(x - m), sum((x - m)^2)
#pragma unroll
        for (int e = 0; e < kEpv; ++e) {
          const float d = e < vp0.nv ? x0[e] - m : 0.f;
          q[0] += d;
          q[1] += d * d;
        }
#pragma unroll 1
        for (int64_t v = lane + ts; valid && v < nvec; v += ts) {
          float xv[kEpv];
          const VecPos vp = vec_pos(rm, v);
          load_vec<T>(xr, rm, kOpX, vp, true, xv);
#pragma unroll
          for (int e = 0; e < kEpv; ++e) {
            const float d = e < vp.nv ? xv[e] - m : 0.f;
            q[0] += d;
            q[1] += d * d;
          }
        }
        team_sum<2>(q, ts, red, 1);
        const float cm = q[0] / float(D);
        const float rstd = rsqrtf(fmaxf(q[1] / float(D) - cm * cm, 0.f) + p.eps);
        if (!valid) continue;  // uniform per team; the team sums above were shared
        if (lane == 0) {
          p.mean[r] = m + cm;
          p.rstd[r] = rstd;
        }
        // y of vector v (xv its x); the segment's modulation row s, element by element.
        auto out = [&](const VecPos& vp, const float(&xv)[kEpv]) {
          float o[kEpv];
#pragma unroll
          for (int e = 0; e < kEpv; ++e) {
            const int64_t j = col_at(rm, vp, e);
            const bool in = e < vp.nv;
            const float w = in && p.weight ? ld_any(p.weight, p.weight_dtype, j) : 1.f;
            const float b = in && p.bias ? ld_any(p.bias, p.weight_dtype, j) : 0.f;
            const float s1 = in ? 1.f + to_f(scale[s * p.scale_stride + j]) : 0.f;
            const float t = in ? to_f(shift[s * p.shift_stride + j]) : 0.f;
            o[e] = ((xv[e] - m - cm) * rstd * w + b) * s1 + t;
          }
          store_vec<T>(y + r * p.y_stride, rm, kOpY, vp, o);
        };
        out(vp0, x0);
#pragma unroll 1
        for (int64_t v = lane + ts; v < nvec; v += ts) {
          float xv[kEpv];
          const VecPos vp = vec_pos(rm, v);
          load_vec<T>(xr, rm, kOpX, vp, true, xv);
          out(vp, xv);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- backward

template <typename T, typename TM>
__global__ void __launch_bounds__(kMaxTeam) adaln_bwd_seg_kernel(const Args a) {
  const AdalnParams& p = a.p;
  const Cfg& c = a.c;
  __shared__ float red[2][32][2];
  extern __shared__ float part[];  // [teams][D] when teams > 1: the teams' sums in team order
  const int ts = c.team_size, team = threadIdx.x / ts, lane = threadIdx.x - team * ts;
  const int64_t D = p.dim, nvec = a.m.count, teams = c.teams_per_block;
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.dx);
  const TM* scale = static_cast<const TM*>(p.scale);
  float* ws = static_cast<float*>(p.workspace);
  const bool acc = a.off_s >= 0;  // reductions over rows wanted
  const RowMap& rm = a.m;
  zero_tickets(a);
  const VecPos vp0 = vec_pos(rm, lane);  // this thread's first vector, held in registers
  unsigned phase = 0;                    // alternates the team_sum slot across rows
  for (int64_t k = blockIdx.x; k < c.chunks; k += gridDim.x) {
    const int64_t c0 = k * c.chunk_rows;
    for (PieceWalk pw(p, c0, c0 + c.chunk_rows < p.rows ? c0 + c.chunk_rows : p.rows); !pw.done();
         pw.next(p)) {
      const int64_t s = pw.s;
      float* dst1 = acc ? ws + a.off_t + (k + s) * D : nullptr;  // S1 = sum dy of the piece
      float* dst2 = acc ? ws + a.off_s + (k + s) * D : nullptr;  // S2 = sum dy xhat
      float acc1[kEpv] = {}, acc2[kEpv] = {};                    // vector 0's S1, S2
      for (int64_t rb = pw.r0; rb < pw.e; rb += teams) {         // uniform per block
        const int64_t r = rb + team;
        const bool valid = r < pw.e;
        const float mean = valid ? p.mean[r] : 0.f, rstd = valid ? p.rstd[r] : 0.f;
        // xhat, g = dy and dxhat = dy (1 + scale_s) w of vector vp from its raw x, dy.
        auto vals = [&](const VecPos& vp, const float(&xv)[kEpv], const float(&gv)[kEpv],
                        float(&xh)[kEpv], float(&dxh)[kEpv]) {
#pragma unroll
          for (int e = 0; e < kEpv; ++e) {
            const int64_t j = col_at(rm, vp, e);
            const bool in = e < vp.nv;
            const float w = in && p.weight ? ld_any(p.weight, p.weight_dtype, j) : 1.f;
            const float s1 = in ? 1.f + to_f(scale[s * p.scale_stride + j]) : 0.f;
            xh[e] = in ? (xv[e] - mean) * rstd : 0.f;
            dxh[e] = gv[e] * s1 * w;
          }
        };
        float x0[kEpv], g0[kEpv], xh[kEpv], dxh[kEpv];
        load_vec<T>(x + r * p.x_stride, rm, kOpX, vp0, valid, x0);
        load_vec<T>(dy + r * p.dy_stride, rm, kOpDy, vp0, valid, g0);
        vals(vp0, x0, g0, xh, dxh);
        float q[2] = {0.f, 0.f};  // sum dxhat, sum dxhat xhat
#pragma unroll
        for (int e = 0; e < kEpv; ++e) q[0] += dxh[e], q[1] += dxh[e] * xh[e];
#pragma unroll 1
        for (int64_t v = lane + ts; valid && v < nvec; v += ts) {
          float xv[kEpv], gv[kEpv];
          const VecPos vp = vec_pos(rm, v);
          load_vec<T>(x + r * p.x_stride, rm, kOpX, vp, true, xv);
          load_vec<T>(dy + r * p.dy_stride, rm, kOpDy, vp, true, gv);
          vals(vp, xv, gv, xh, dxh);
#pragma unroll
          for (int e = 0; e < kEpv; ++e) q[0] += dxh[e], q[1] += dxh[e] * xh[e];
        }
        team_sum<2>(q, ts, red, int(phase++ & 1u));
        if (!valid) continue;
        const float c1 = q[0] / float(D), c2 = q[1] / float(D);
        auto dx_out = [&](const VecPos& vp) {
          float o[kEpv];
#pragma unroll
          for (int e = 0; e < kEpv; ++e) o[e] = rstd * (dxh[e] - c1 - xh[e] * c2);
          store_vec<T>(dx + r * p.dx_stride, rm, kOpDx, vp, o);
        };
        vals(vp0, x0, g0, xh, dxh);
        dx_out(vp0);
#pragma unroll
        for (int e = 0; e < kEpv; ++e) acc1[e] += g0[e], acc2[e] += g0[e] * xh[e];
          // Vectors past the first (D > 4096: one team a block, its rows in order): their sums
          // are the piece's workspace rows, written by its first row, then added to.
#pragma unroll 1
        for (int64_t v = lane + ts; v < nvec; v += ts) {
          float xv[kEpv], gv[kEpv];
          const VecPos vp = vec_pos(rm, v);
          load_vec<T>(x + r * p.x_stride, rm, kOpX, vp, true, xv);
          load_vec<T>(dy + r * p.dy_stride, rm, kOpDy, vp, true, gv);
          vals(vp, xv, gv, xh, dxh);
          dx_out(vp);
          if (acc)
#pragma unroll
            for (int e = 0; e < kEpv; ++e)
              if (e < vp.nv) {
                const int64_t j = col_at(rm, vp, e);
                const bool first = r == pw.r0;
                dst1[j] = (first ? 0.f : dst1[j]) + gv[e];
                dst2[j] = (first ? 0.f : dst2[j]) + gv[e] * xh[e];
              }
        }
      }
      if (!acc) continue;
      // The piece's two partial rows: vector 0 of every thread, teams combined in team order.
      auto flush = [&](const float(&v)[kEpv], float* dst) {
        if (teams == 1) {
#pragma unroll
          for (int e = 0; e < kEpv; ++e)
            if (e < vp0.nv) dst[col_at(rm, vp0, e)] = v[e];
          return;
        }
        __syncthreads();  // the previous piece's reads of part are done
#pragma unroll
        for (int e = 0; e < kEpv; ++e)
          if (e < vp0.nv) part[team * D + col_at(rm, vp0, e)] = v[e];
        __syncthreads();
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
          float t = 0.f;
          for (int64_t u = 0; u < teams; ++u) t += part[u * D + j];
          dst[j] = t;
        }
      };
      flush(acc1, dst1);
      flush(acc2, dst2);
    }
  }
}

}  // namespace
}  // namespace adaln_cuda
}  // namespace adaptiveload
