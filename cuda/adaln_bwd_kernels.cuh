// Backward kernels of the fused adaLN op: one pass over x and dy per row gives
//
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = dy (1 + scale) w
//
// and the per-token dscale / dshift; the reductions over rows (per-sample dscale /
// dshift, dweight / dbias) are accumulated in registers over a chunk of rows and written
// as two fp32 partial rows a chunk to the workspace, which adaln_finalize_kernel
// (adaln_finalize.cu) sums in a fixed order. Three families, as in the forward:
//   adaln_bwd_kernel       teams of ts <= 512 threads, 1-2 vectors a thread (AFFINE: weight
//                          or bias given);
//   adaln_bwd_wide_kernel  one vector a thread, teams of up to 1024, without weight / bias;
//   adaln_bwd_loop_kernel  D > 8192: a block loops over the row, re-reading it per pass.
// Instantiated in adaln_bwd_{f32,bf16,f16}.cu; launched through adaln_bwd_launch_template.cuh.
#pragma once

#include "adaln_device.cuh"

namespace adaptiveload {
namespace adaln_cuda {
namespace {

// ---------------------------------------------------------------- backward

template <typename T, typename TM, int VPT, bool AFFINE, bool ST, bool WIDE>
__device__ __forceinline__ void adaln_bwd_rows(const Args& a) {
  const AdalnParams& p = a.p;
  const Cfg& c = a.c;
  __shared__ float red[2][32][2];
  extern __shared__ float part[];  // [rpb][D] when rpb > 1; sample teams: [rpb][2][D]
  const int ts = c.team_size, team = threadIdx.x / ts, lane = threadIdx.x - team * ts;
  const int64_t D = p.dim;
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.dx);
  const TM* scale = static_cast<const TM*>(p.scale);
  TM* dscale = static_cast<TM*>(p.dscale);
  TM* dshift = static_cast<TM*>(p.dshift);
  float* ws = static_cast<float*>(p.workspace);
  // Reductions over rows wanted: the chunk partials (see ws_layout), or with sample teams
  // also the sample's own dscale / dshift, which the team writes itself.
  const bool tot = a.off_s >= 0, acc = tot || (ST && (dscale || dshift));
  const RowMap& rm = a.m;
  zero_tickets(a);
  VecPos vp[VPT];  // this thread's vectors of the row
#pragma unroll
  for (int i = 0; i < VPT; ++i) vp[i] = vec_pos(rm, int64_t(i) * ts + lane);
  // Weight, bias and the sample's 1 + scale stay in registers with one vector a thread.
  // With two, they do not fit beside the accumulators under the 128-register cap of 512
  // threads (ptxas spilled 520-570 bytes), so they are re-read for every row from the
  // [D] / [B, D] operands, which stay in L1; weight and bias element by element where
  // used (read a vector at a time up front, the f32 kernel spilled 8 bytes on sm_80).
  // Sample teams with two vectors re-read 1 + scale too (in registers, ptxas spilled 16-48
  // bytes beside the sample's bookkeeping).
  // The wide kernels (64 registers) re-read them too, and the row itself for dx after the
  // row sums instead of holding xhat and dxhat across them.
  constexpr bool kRegs = !WIDE && (VPT == 1 || (!AFFINE && !ST));
  // The wide kernels keep their two accumulators in shared memory (sacc, [2][8][ts] after
  // the sample teams' rows), each slot owned by one thread: 64 registers leave no room.
  float* const sacc = WIDE ? part + (ST && tot ? 2 * D : 0) : nullptr;
  auto wb_at = [&](int i, int e, float& wv, float& bv) {  // element e of vector i
    const bool in = e < vp[i].nv;
    const int64_t j = col_at(rm, vp[i], e);
    wv = in && p.weight ? ld_any(p.weight, p.weight_dtype, j) : 1.f;
    bv = in && p.bias ? ld_any(p.bias, p.weight_dtype, j) : 0.f;
  };
  auto load_wb = [&](int i, float(&wv)[kEpv], float(&bv)[kEpv]) {
#pragma unroll
    for (int e = 0; e < kEpv; ++e) wb_at(i, e, wv[e], bv[e]);
  };
  float w[kRegs ? VPT : 1][kEpv], b[kRegs ? VPT : 1][kEpv];
  if constexpr (AFFINE && kRegs) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) load_wb(i, w[i], b[i]);
  }
  unsigned phase = 0;  // alternates the team_sum slot across every row of every chunk
  for (ChunkWalk cw(c); cw.k < c.chunks; cw.next(c)) {
    const int64_t k = cw.k;
    int64_t grp = 0, r0 = 0, r1 = 0, l = -1;  // sample teams: grp this team's sample, l its row
    if constexpr (!ST) {
      chunk_rows(c, cw, grp, r0, r1);
    } else {
      grp = k * c.samples_per_chunk + team;
      r1 = k * c.samples_per_chunk + c.samples_per_chunk < p.batch
               ? k * c.samples_per_chunk + c.samples_per_chunk
               : p.batch;  // samples end
      // This team's (1 + scale) S1, (1 + scale) S2 over its samples: [team][2][D] in shared
      // memory, each column owned by one thread of the team.
      if (tot)
#pragma unroll
        for (int i = 0; i < VPT; ++i)
#pragma unroll
          for (int e = 0; e < kEpv; ++e)
            if (e < vp[i].nv) {
              part[(2 * team) * D + col_at(rm, vp[i], e)] = 0.f;
              part[(2 * team + 1) * D + col_at(rm, vp[i], e)] = 0.f;
            }
    }
    float s1[kRegs ? VPT : 1][kEpv] = {};  // 1 + scale of this chunk's (team's) sample
    // Two accumulators cover every reduction over rows: with g = dy (per-sample) or
    // g = dn = dy (1 + scale) (per-token), acc1 = sum g and acc2 = sum g * xhat. The
    // finalize derives dshift = S1, dscale = w S2 + b S1, dbias = sum_b (1 + s_b) S1_b,
    // dweight = sum_b (1 + s_b) S2_b (per-sample), or dbias = S1, dweight = S2 (per-token).
    // With sample teams they cover the team's current sample only.
    // The wide kernels keep them in shared memory instead (sacc).
    float acc1[VPT][kEpv] = {}, acc2[VPT][kEpv] = {};
    auto A = [&](int n, int i, int e) -> float& {  // accumulator n of element e of vector i
      if constexpr (WIDE)
        return sacc[(n * kEpv + e) * ts + lane];
      else
        return n == 0 ? acc1[i][e] : acc2[i][e];
    };
    auto start = [&](bool ok) {  // the sums of a new chunk (sample); ok: grp is a sample
#pragma unroll
      for (int i = 0; i < VPT; ++i)
#pragma unroll
        for (int e = 0; e < kEpv; ++e) {
          if constexpr (kRegs)
            s1[i][e] = (ok && !p.per_token && (e < vp[i].nv))
                           ? 1.f + to_f(scale[grp * p.scale_stride + col_at(rm, vp[i], e)])
                           : 0.f;
          A(0, i, e) = A(1, i, e) = 0.f;
        }
    };
    if constexpr (!ST) start(true);
    for (int64_t it = 0; it < c.rows_per_team; ++it) {
      int64_t r;
      bool valid;
      if constexpr (!ST) {
        r = r0 + team + it * c.teams_per_block;
        valid = r < r1;
      } else {
        if (++l == c.group_rows) l = 0, grp += c.teams_per_block;
        valid = grp < r1;
        r = grp * c.group_rows + l;
        if (l == 0) start(valid);
      }
      const float mean = valid ? p.mean[r] : 0.f, rstd = valid ? p.rstd[r] : 0.f;
      float xh[VPT][kEpv], g[VPT][kEpv], dxh[VPT][kEpv];
      float q[2] = {0.f, 0.f};  // sum dxhat, sum dxhat * xhat
      // 1 + scale and weight / bias of vector i of row r
      auto mod = [&](int i, bool ok, float(&sv)[kEpv], float(&wv)[kEpv], float(&bv)[kEpv]) {
        if (p.per_token) {
          load_vec<TM>(scale + r * p.scale_stride, rm, kOpScale, vp[i], ok, sv);
#pragma unroll
          for (int e = 0; e < kEpv; ++e) sv[e] += 1.f;
        } else if constexpr (kRegs) {
#pragma unroll
          for (int e = 0; e < kEpv; ++e) sv[e] = s1[i][e];
        } else {
#pragma unroll
          for (int e = 0; e < kEpv; ++e)
            sv[e] = ok && e < vp[i].nv
                        ? 1.f + to_f(scale[grp * p.scale_stride + col_at(rm, vp[i], e)])
                        : 0.f;
        }
        if constexpr (AFFINE && kRegs) {
#pragma unroll
          for (int e = 0; e < kEpv; ++e) wv[e] = w[i][e], bv[e] = b[i][e];
        }
      };
      // xhat, g = dy, dxhat and nrm = xhat w + b of vector i of row r (dn = g (1 + scale))
      auto vals = [&](int i, float(&xhi)[kEpv], float(&gi)[kEpv], float(&dxhi)[kEpv],
                      float(&nrm)[kEpv], float(&dn)[kEpv]) {
        float xv[kEpv], sv[kEpv], wv[kEpv], bv[kEpv];
        load_vec<T>(x + r * p.x_stride, rm, kOpX, vp[i], valid, xv);
        load_vec<T>(dy + r * p.dy_stride, rm, kOpDy, vp[i], valid, gi);
        mod(i, valid, sv, wv, bv);
#pragma unroll
        for (int e = 0; e < kEpv; ++e) {
          xhi[e] = e < vp[i].nv ? (xv[e] - mean) * rstd : 0.f;  // 0 too when !valid
          // weight / bias read where used (see kRegs)
          if constexpr (AFFINE && !kRegs) wb_at(i, e, wv[e], bv[e]);
          nrm[e] = AFFINE ? xhi[e] * wv[e] + bv[e] : xhi[e];
          dn[e] = gi[e] * sv[e];
          dxhi[e] = AFFINE ? dn[e] * wv[e] : dn[e];
        }
      };
      // The reductions over rows and the per-token dscale / dshift of vector i (the wide
      // kernels: in the second pass, so that fewer values are live at once).
      auto rows_out = [&](int i, const float(&nrm)[kEpv], const float(&dn)[kEpv]) {
        if (acc)
#pragma unroll
          for (int e = 0; e < kEpv; ++e) {
            const float ga = p.per_token ? dn[e] : g[i][e];
            A(0, i, e) += ga;
            A(1, i, e) += ga * xh[i][e];
          }
        if (p.per_token && valid) {
          float o[kEpv];
          if (dscale) {
#pragma unroll
            for (int e = 0; e < kEpv; ++e) o[e] = g[i][e] * nrm[e];
            store_vec<TM>(dscale + r * p.dscale_stride, rm, kOpDscale, vp[i], o);
          }
          if (dshift) store_vec<TM>(dshift + r * p.dshift_stride, rm, kOpDshift, vp[i], g[i]);
        }
      };
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        float nrm[kEpv], dn[kEpv];
        vals(i, xh[i], g[i], dxh[i], nrm, dn);
#pragma unroll
        for (int e = 0; e < kEpv; ++e) {
          q[0] += dxh[i][e];
          q[1] += dxh[i][e] * xh[i][e];
        }
        if constexpr (!WIDE) rows_out(i, nrm, dn);
      }
      team_sum<2>(q, ts, red, int(phase++ & 1u));
      if (!valid) continue;
      const float c1 = q[0] / float(D), c2 = q[1] / float(D);
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        float nrm[kEpv], dn[kEpv];
        // the row again (from L1 / L2): nothing held across the sums
        if constexpr (WIDE) vals(i, xh[i], g[i], dxh[i], nrm, dn);
        float o[kEpv];
#pragma unroll
        for (int e = 0; e < kEpv; ++e) o[e] = rstd * (dxh[i][e] - c1 - xh[i][e] * c2);
        store_vec<T>(dx + r * p.dx_stride, rm, kOpDx, vp[i], o);
        if constexpr (WIDE) rows_out(i, nrm, dn);
      }
      if (ST && l == c.group_rows - 1 && acc) {
        // The team's sample is done: dshift = S1, dscale = w S2 + b S1 (element stores: the
        // [B, D] rows' alignment is not in the row map), (1 + scale) S1 / S2 into part.
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
          float o1[kEpv], o2[kEpv], wv[kEpv], bv[kEpv];
          if constexpr (AFFINE && kRegs) {
#pragma unroll
            for (int e = 0; e < kEpv; ++e) wv[e] = w[i][e], bv[e] = b[i][e];
          } else if constexpr (AFFINE) {
            load_wb(i, wv, bv);
          } else {
#pragma unroll
            for (int e = 0; e < kEpv; ++e) wv[e] = 1.f, bv[e] = 0.f;
          }
#pragma unroll
          for (int e = 0; e < kEpv; ++e)
            o1[e] = A(0, i, e), o2[e] = wv[e] * A(1, i, e) + bv[e] * A(0, i, e);
          if (dshift) store_vec<TM>(dshift + grp * p.dshift_stride, rm, 0, vp[i], o1);
          if (dscale) store_vec<TM>(dscale + grp * p.dscale_stride, rm, 0, vp[i], o2);
          if (tot)
#pragma unroll
            for (int e = 0; e < kEpv; ++e)
              if (e < vp[i].nv) {
                const int64_t j = col_at(rm, vp[i], e);
                float sc;
                if constexpr (kRegs)
                  sc = s1[i][e];
                else
                  sc = 1.f + to_f(scale[grp * p.scale_stride + j]);
                part[(2 * team) * D + j] += sc * A(0, i, e);
                part[(2 * team + 1) * D + j] += sc * A(1, i, e);
              }
        }
      }
    }
    if constexpr (ST) {  // the teams' sums, in team order, are the chunk's two partial rows
      if (tot) {
        __syncthreads();
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
          float t1 = 0.f, t2 = 0.f;
          for (int t = 0; t < c.teams_per_block; ++t)
            t1 += part[(2 * t) * D + j], t2 += part[(2 * t + 1) * D + j];
          ws[a.off_t + k * D + j] = t1;
          ws[a.off_s + k * D + j] = t2;
        }
        __syncthreads();  // before the next chunk clears part
      }
      continue;
    }
    // One partial row per chunk and slot: teams combine in team order.
    auto flush = [&](int n, int64_t off) {
      if (off < 0) return;
      float* dst = ws + off + k * D;
      if (WIDE || c.teams_per_block == 1) {  // the wide kernels: one team a block
#pragma unroll
        for (int i = 0; i < VPT; ++i)
#pragma unroll
          for (int e = 0; e < kEpv; ++e)
            if (e < vp[i].nv) dst[col_at(rm, vp[i], e)] = A(n, i, e);
        return;
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < VPT; ++i)
#pragma unroll
        for (int e = 0; e < kEpv; ++e)
          if (e < vp[i].nv) part[team * D + col_at(rm, vp[i], e)] = A(n, i, e);
      __syncthreads();
      for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
        float s = 0.f;
        for (int t = 0; t < c.teams_per_block; ++t) s += part[t * D + j];
        dst[j] = s;
      }
    };
    if (acc) {
      flush(0, a.off_t);
      flush(1, a.off_s);
    }
  }
}

template <typename T, typename TM, int VPT, bool AFFINE, bool ST>
__global__ void __launch_bounds__(kMaxTeam) adaln_bwd_kernel(const Args a) {
  adaln_bwd_rows<T, TM, VPT, AFFINE, ST, false>(a);
}
// Wide: without weight / bias only (make_layout).
template <typename T, typename TM, bool ST>
__global__ void __launch_bounds__(kWideTeam) adaln_bwd_wide_kernel(const Args a) {
  adaln_bwd_rows<T, TM, 1, false, ST, true>(a);
}

// ---------------------------------------------------------------- rows wider than a team

// D > 8192: a block of kMaxTeam threads loops over the row, reading x and dy twice (row
// sums, then dx), as the forward's adaln_fwd_loop_kernel does.
// Vectors of its row a thread's accumulators keep in registers in the looped backward
// (2 x 8 floats each: the first 8192 columns of the row, 4096 with weight / bias).
// Beyond them the thread adds into its chunk's fp32 partial rows in the workspace
// directly, a read-modify-write of 8 bytes a column and row that is meant to stay in L2
// (each column has one owner thread for the whole chunk: no atomics, a fixed order).
// More spilled (ptxas: 3 or 4 vectors 8-216 bytes, 2 with weight / bias 20 on sm_90).
template <bool AFFINE>
constexpr int kLoopAccVecs = AFFINE ? 1 : 2;

template <typename T, typename TM, bool AFFINE>
__global__ void __launch_bounds__(kMaxTeam) adaln_bwd_loop_kernel(const Args a) {
  const AdalnParams& p = a.p;
  const Cfg& c = a.c;
  __shared__ float red[2][32][2];
  const int ts = c.team_size, lane = threadIdx.x;
  const int64_t D = p.dim, nvec = a.m.count;
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  T* dx = static_cast<T*>(p.dx);
  const TM* scale = static_cast<const TM*>(p.scale);
  TM* dscale = static_cast<TM*>(p.dscale);
  TM* dshift = static_cast<TM*>(p.dshift);
  float* ws = static_cast<float*>(p.workspace);
  const bool acc = a.off_s >= 0;
  const RowMap& rm = a.m;
  zero_tickets(a);
  unsigned phase = 0;
  for (ChunkWalk cw(c); cw.k < c.chunks; cw.next(c)) {
    const int64_t k = cw.k;
    int64_t grp, r0, r1;
    chunk_rows(c, cw, grp, r0, r1);
    float* dst1 = acc ? ws + a.off_t + k * D : nullptr;  // sum g, this chunk
    float* dst2 = acc ? ws + a.off_s + k * D : nullptr;  // sum g * xhat
    float acc1[kLoopAccVecs<AFFINE>][kEpv], acc2[kLoopAccVecs<AFFINE>][kEpv];
#pragma unroll
    for (int j = 0; j < kLoopAccVecs<AFFINE>; ++j)
#pragma unroll
      for (int e = 0; e < kEpv; ++e) acc1[j][e] = acc2[j][e] = 0.f;
    for (int64_t r = r0; r < r1; ++r) {
      const float mean = p.mean[r], rstd = p.rstd[r];
      // xhat, g and dxhat of vector v (g = dy; sv = 1 + scale; nrm = xhat w + b)
      auto row_vec = [&](int64_t v, float(&xh)[kEpv], float(&g)[kEpv], float(&dxh)[kEpv],
                         float(&nrm)[kEpv], float(&sv)[kEpv]) {
        float xv[kEpv];
        const VecPos vp = vec_pos(rm, v);
        load_vec<T>(x + r * p.x_stride, rm, kOpX, vp, true, xv);
        load_vec<T>(dy + r * p.dy_stride, rm, kOpDy, vp, true, g);
        if (p.per_token) {
          load_vec<TM>(scale + r * p.scale_stride, rm, kOpScale, vp, true, sv);
#pragma unroll
          for (int e = 0; e < kEpv; ++e) sv[e] += 1.f;
        } else {
#pragma unroll
          for (int e = 0; e < kEpv; ++e)
            sv[e] = e < vp.nv ? 1.f + to_f(scale[grp * p.scale_stride + col_at(rm, vp, e)]) : 0.f;
        }
#pragma unroll
        for (int e = 0; e < kEpv; ++e) {
          const int64_t j = col_at(rm, vp, e);
          const bool in = e < vp.nv;
          float w = 1.f, b = 0.f;
          if (AFFINE) {
            w = in && p.weight ? ld_any(p.weight, p.weight_dtype, j) : 1.f;
            b = in && p.bias ? ld_any(p.bias, p.weight_dtype, j) : 0.f;
          }
          xh[e] = in ? (xv[e] - mean) * rstd : 0.f;
          nrm[e] = AFFINE ? xh[e] * w + b : xh[e];
          const float dn = g[e] * sv[e];
          dxh[e] = AFFINE ? dn * w : dn;
        }
      };
      float q[2] = {0.f, 0.f};  // sum dxhat, sum dxhat * xhat
#pragma unroll 1
      for (int64_t v = lane; v < nvec; v += ts) {
        float xh[kEpv], g[kEpv], dxh[kEpv], nrm[kEpv], sv[kEpv];
        row_vec(v, xh, g, dxh, nrm, sv);
#pragma unroll
        for (int e = 0; e < kEpv; ++e) {
          q[0] += dxh[e];
          q[1] += dxh[e] * xh[e];
        }
      }
      team_sum<2>(q, ts, red, int(phase++ & 1u));
      const float c1 = q[0] / float(D), c2 = q[1] / float(D);
      // Second pass over vector v: dx, the per-token dscale / dshift, and the reductions
      // over rows into a1 / a2.
      auto out_vec = [&](int64_t v, float(&a1)[kEpv], float(&a2)[kEpv]) {
        float xh[kEpv], g[kEpv], dxh[kEpv], nrm[kEpv], sv[kEpv], o[kEpv];
        row_vec(v, xh, g, dxh, nrm, sv);
#pragma unroll
        for (int e = 0; e < kEpv; ++e) {
          o[e] = rstd * (dxh[e] - c1 - xh[e] * c2);
          const float ga = p.per_token ? g[e] * sv[e] : g[e];
          a1[e] += ga;
          a2[e] += ga * xh[e];
        }
        const VecPos vp = vec_pos(rm, v);
        store_vec<T>(dx + r * p.dx_stride, rm, kOpDx, vp, o);
        if (p.per_token) {
          if (dscale) {
#pragma unroll
            for (int e = 0; e < kEpv; ++e) o[e] = g[e] * nrm[e];
            store_vec<TM>(dscale + r * p.dscale_stride, rm, kOpDscale, vp, o);
          }
          if (dshift) store_vec<TM>(dshift + r * p.dshift_stride, rm, kOpDshift, vp, g);
        }
      };
#pragma unroll
      for (int j = 0; j < kLoopAccVecs<AFFINE>; ++j)
        if (lane + int64_t(j) * ts < nvec) out_vec(lane + int64_t(j) * ts, acc1[j], acc2[j]);
#pragma unroll 1
      for (int64_t v = lane + int64_t(kLoopAccVecs<AFFINE>) * ts; v < nvec; v += ts) {
        float a1[kEpv], a2[kEpv];
        const VecPos vp = vec_pos(rm, v);
#pragma unroll
        for (int e = 0; e < kEpv; ++e) {
          const bool in = acc && r > r0 && e < vp.nv;
          a1[e] = in ? dst1[col_at(rm, vp, e)] : 0.f;
          a2[e] = in ? dst2[col_at(rm, vp, e)] : 0.f;
        }
        out_vec(v, a1, a2);
        if (acc)
#pragma unroll
          for (int e = 0; e < kEpv; ++e)
            if (e < vp.nv) dst1[col_at(rm, vp, e)] = a1[e], dst2[col_at(rm, vp, e)] = a2[e];
      }
    }
    if (acc)
#pragma unroll
      for (int j = 0; j < kLoopAccVecs<AFFINE>; ++j) {
        const VecPos vp = vec_pos(rm, lane + int64_t(j) * ts);
#pragma unroll
        for (int e = 0; e < kEpv; ++e)
          if (e < vp.nv) dst1[col_at(rm, vp, e)] = acc1[j][e], dst2[col_at(rm, vp, e)] = acc2[j][e];
      }
  }
}

}  // namespace
}  // namespace adaln_cuda
}  // namespace adaptiveload
