// Forward kernels of the fused adaLN op: per row, two-pass fp32 statistics (mean, then the
// corrected sum of squared deviations, from registers) and
//
//   y = ((x - mean) * rstd * w + b) * (1 + scale) + shift,  mean / rstd [N] fp32 saved
//
// for the backward. Three families (the variant is picked on the host, kernel_variant):
//   adaln_fwd_kernel       a team of ts <= 512 threads a row, 1-2 vectors of 8 a thread;
//   adaln_fwd_wide_kernel  one vector a thread in teams of up to 1024 (D 4097 - 8192);
//   adaln_fwd_loop_kernel  D > 8192: a block loops over the row, re-reading it per pass.
// Instantiated in adaln_fwd_{f32,bf16,f16}.cu; launched through adaln_fwd_launch_template.cuh.
#pragma once

#include "adaln_device.cuh"

namespace adaptiveload {
namespace adaln_cuda {
namespace {

// ---------------------------------------------------------------- forward

// ST: sample teams (Cfg::samples_per_chunk > 0), a separate instance so that the chunks-of-rows one
// keeps its registers. WIDE: one vector a thread in teams of up to kWideTeam threads (the kernel
// adaln_fwd_wide_kernel, 64 registers a thread).
template <typename T, typename TM, int VPT, bool ST, bool WIDE>
__device__ __forceinline__ void adaln_fwd_rows(const Args& a) {
  const AdalnParams& p = a.p;
  const Cfg& c = a.c;
  __shared__ float red[2][32][2];
  const int ts = c.team_size, team = threadIdx.x / ts, lane = threadIdx.x - team * ts;
  const int64_t D = p.dim;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const TM* scale = static_cast<const TM*>(p.scale);
  const TM* shift = static_cast<const TM*>(p.shift);
  const RowMap& rm = a.m;
  VecPos vp[VPT];  // this thread's vectors of the row
#pragma unroll
  for (int i = 0; i < VPT; ++i) vp[i] = vec_pos(rm, int64_t(i) * ts + lane);
  // Per-sample: y = xhat * A + B, A = w (1 + s), B = b (1 + s) + t, folded once per chunk
  // (not with sample teams, see below). Per-token: A = w, B = b, and the modulation is
  // applied per row.
  float A[VPT][kEpv], B[VPT][kEpv];
  auto fold = [&](int64_t grp) {
#pragma unroll
    for (int i = 0; i < VPT; ++i)
#pragma unroll
      for (int e = 0; e < kEpv; ++e) {
        const int64_t j = col_at(rm, vp[i], e);
        const bool in = e < vp[i].nv;
        float w = 1.f, b = 0.f;
        if (in) {
          if (p.weight) w = ld_any(p.weight, p.weight_dtype, j);
          if (p.bias) b = ld_any(p.bias, p.weight_dtype, j);
        }
        if (!p.per_token && in) {
          const float s1 = 1.f + to_f(scale[grp * p.scale_stride + j]);
          A[i][e] = w * s1;
          B[i][e] = b * s1 + to_f(shift[grp * p.shift_stride + j]);
        } else {
          A[i][e] = w;
          B[i][e] = b;
        }
      }
  };
  for (ChunkWalk cw(c); cw.k < c.chunks; cw.next(c)) {
    const int64_t k = cw.k;
    int64_t grp = 0, r0 = 0, r1 = 0, l = -1;  // sample teams: grp this team's sample, l its row
    if constexpr (!ST) {
      chunk_rows(c, cw, grp, r0, r1);
      if constexpr (!WIDE) fold(grp);
    } else {
      grp = k * c.samples_per_chunk + team;
      r1 = k * c.samples_per_chunk + c.samples_per_chunk < p.batch
               ? k * c.samples_per_chunk + c.samples_per_chunk
               : p.batch;  // samples end
    }
    // The team's rows in order. (rn, vn, gn): the next row, its validity and sample; its
    // whole vectors are loaded into nx while the current row is reduced (software
    // prefetch: the loads are in flight across the reductions' shuffles and barriers).
    int64_t rn = 0, gn = grp;
    bool vn = false;
    auto advance = [&](int64_t it) {
      if constexpr (!ST) {
        rn = r0 + team + it * c.teams_per_block;
        vn = rn < r1;
      } else {
        if (++l == c.group_rows) l = 0, grp += c.teams_per_block;
        gn = grp;
        vn = grp < r1;
        rn = grp * c.group_rows + l;
      }
    };
    // Not with sample teams: their one-vector instance spilled (8-20 bytes at ptxas' 64
    // registers there), and a team's rows are few per sample.
    constexpr bool kAhead = !ST && !WIDE;
    RawVec<T> nx[VPT] = {};
    auto prefetch = [&]() {
#pragma unroll
      for (int i = 0; i < VPT; ++i)
        if (kAhead && vn && whole(rm, kOpX, vp[i])) {
          const uint4* q = reinterpret_cast<const uint4*>(x + rn * p.x_stride + vp[i].c0);
#pragma unroll
          for (int n = 0; n < int(sizeof(T) / 2); ++n) nx[i].u[n] = q[n];
        }
    };
    advance(0);
    prefetch();
    for (int64_t it = 0; it < c.rows_per_team; ++it) {
      const int64_t r = rn, g = gn;
      const bool valid = vn;
      float v[VPT][kEpv];
      float s[1] = {0.f};
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        if (kAhead && valid && whole(rm, kOpX, vp[i]))
          Vec8<T>::load(reinterpret_cast<const T*>(nx[i].u), v[i]);
        else
          load_vec<T>(x + r * p.x_stride, rm, kOpX, vp[i], valid, v[i]);
#pragma unroll
        for (int e = 0; e < kEpv; ++e) s[0] += v[i][e];
      }
      if (it + 1 < c.rows_per_team) {  // uniform per team
        advance(it + 1);
        prefetch();
      }
      team_sum<1>(s, ts, reinterpret_cast<float(*)[32][1]>(red), 0);
      const float m = s[0] / float(D);
      float q[2] = {0.f, 0.f};  // sum(x - m), sum((x - m)^2)
#pragma unroll
      for (int i = 0; i < VPT; ++i)
#pragma unroll
        for (int e = 0; e < kEpv; ++e) {
          const float d = e < vp[i].nv ? v[i][e] - m : 0.f;
          q[0] += d;
          q[1] += d * d;
        }
      team_sum<2>(q, ts, red, 1);
      const float cm = q[0] / float(D);
      const float var = fmaxf(q[1] / float(D) - cm * cm, 0.f);
      const float rstd = rsqrtf(var + p.eps);
      if (!valid) continue;  // uniform per team; the barriers above were shared
      if (lane == 0) {
        p.mean[r] = m + cm;
        p.rstd[r] = rstd;
      }
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        float o[kEpv];
        if constexpr (ST || WIDE) {
          // No folded A / B: with sample teams a sample lasts a few rows, and in registers
          // beside the sample's bookkeeping they spilled (12 bytes), as in the wide kernel (64
          // registers); the modulation row is read where used (a sample's element by
          // element: the [B, D] rows' alignment is not in the row map).
          float sv[kEpv], tv[kEpv];
          const bool tok = !ST && p.per_token;
          load_vec<TM>(scale + (tok ? r : g) * p.scale_stride, rm, tok ? kOpScale : 0u, vp[i], true,
                       sv);
          load_vec<TM>(shift + (tok ? r : g) * p.shift_stride, rm, tok ? kOpShift : 0u, vp[i], true,
                       tv);
#pragma unroll
          for (int e = 0; e < kEpv; ++e) {
            const int64_t j = col_at(rm, vp[i], e);
            const bool in = e < vp[i].nv;
            const float w = in && p.weight ? ld_any(p.weight, p.weight_dtype, j) : 1.f;
            const float b = in && p.bias ? ld_any(p.bias, p.weight_dtype, j) : 0.f;
            o[e] = ((v[i][e] - m - cm) * rstd * w + b) * (1.f + sv[e]) + tv[e];
          }
        } else if (p.per_token) {
          float sv[kEpv], tv[kEpv];
          load_vec<TM>(scale + r * p.scale_stride, rm, kOpScale, vp[i], true, sv);
          load_vec<TM>(shift + r * p.shift_stride, rm, kOpShift, vp[i], true, tv);
#pragma unroll
          for (int e = 0; e < kEpv; ++e)
            o[e] = ((v[i][e] - m - cm) * rstd * A[i][e] + B[i][e]) * (1.f + sv[e]) + tv[e];
        } else {
#pragma unroll
          for (int e = 0; e < kEpv; ++e) o[e] = (v[i][e] - m - cm) * rstd * A[i][e] + B[i][e];
        }
        store_vec<T>(y + r * p.y_stride, rm, kOpY, vp[i], o);
      }
    }
  }
}

// Teams of up to 512 threads, 1-2 vectors a thread (128 registers), and of up to 1024, one
// vector a thread (64 registers).
template <typename T, typename TM, int VPT, bool ST>
__global__ void __launch_bounds__(kMaxTeam) adaln_fwd_kernel(const Args a) {
  adaln_fwd_rows<T, TM, VPT, ST, false>(a);
}
template <typename T, typename TM, bool ST>
__global__ void __launch_bounds__(kWideTeam) adaln_fwd_wide_kernel(const Args a) {
  adaln_fwd_rows<T, TM, 1, ST, true>(a);
}

// ---------------------------------------------------------------- rows wider than a team

// D > kWideTeam * kEpv (8192): the row no longer fits in the registers of one
// team, so a team of kMaxTeam threads (the whole block) loops over the row's vectors
// (vector v = lane + j * ts) once per pass and re-reads it from memory for every pass:
// the forward reads x three times (sum, squared deviations, output), the backward reads
// x and dy twice (row sums, then dx). A 12,288- or 16,384-wide row is 24-64 KB per
// operand, so the re-reads are meant to hit L1 / L2 (as Apex's layer norm does), not DRAM.
// Modulation, weight and bias are re-read per row and pass for the same reason.

template <typename T, typename TM>
__global__ void __launch_bounds__(kMaxTeam) adaln_fwd_loop_kernel(const Args a) {
  const AdalnParams& p = a.p;
  const Cfg& c = a.c;
  __shared__ float red[2][32][2];
  const int ts = c.team_size, lane = threadIdx.x;
  const int64_t D = p.dim, nvec = a.m.count;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const TM* scale = static_cast<const TM*>(p.scale);
  const TM* shift = static_cast<const TM*>(p.shift);
  const RowMap& rm = a.m;
  for (ChunkWalk cw(c); cw.k < c.chunks; cw.next(c)) {
    int64_t grp, r0, r1;
    chunk_rows(c, cw, grp, r0, r1);
    for (int64_t r = r0; r < r1; ++r) {  // rpb = 1: the block is the row's team
      const T* xr = x + r * p.x_stride;
      float s[1] = {0.f};
#pragma unroll 1
      for (int64_t v = lane; v < nvec; v += ts) {
        float xv[kEpv];
        load_vec<T>(xr, rm, kOpX, vec_pos(rm, v), true, xv);
#pragma unroll
        for (int e = 0; e < kEpv; ++e) s[0] += xv[e];
      }
      team_sum<1>(s, ts, reinterpret_cast<float(*)[32][1]>(red), 0);
      const float m = s[0] / float(D);
      float q[2] = {0.f, 0.f};  // sum(x - m), sum((x - m)^2)
#pragma unroll 1
      for (int64_t v = lane; v < nvec; v += ts) {
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
      const float var = fmaxf(q[1] / float(D) - cm * cm, 0.f);
      const float rstd = rsqrtf(var + p.eps);
      if (lane == 0) {
        p.mean[r] = m + cm;
        p.rstd[r] = rstd;
      }
#pragma unroll 1
      for (int64_t v = lane; v < nvec; v += ts) {
        float xv[kEpv], o[kEpv];
        const VecPos vp = vec_pos(rm, v);
        load_vec<T>(xr, rm, kOpX, vp, true, xv);
        if (p.per_token) {
          float sv[kEpv], tv[kEpv];
          load_vec<TM>(scale + r * p.scale_stride, rm, kOpScale, vp, true, sv);
          load_vec<TM>(shift + r * p.shift_stride, rm, kOpShift, vp, true, tv);
#pragma unroll
          for (int e = 0; e < kEpv; ++e) {
            const int64_t j = col_at(rm, vp, e);
            const bool in = e < vp.nv;
            const float w = in && p.weight ? ld_any(p.weight, p.weight_dtype, j) : 1.f;
            const float b = in && p.bias ? ld_any(p.bias, p.weight_dtype, j) : 0.f;
            o[e] = ((xv[e] - m - cm) * rstd * w + b) * (1.f + sv[e]) + tv[e];
          }
        } else {
#pragma unroll
          for (int e = 0; e < kEpv; ++e) {
            const int64_t j = col_at(rm, vp, e);
            const bool in = e < vp.nv;
            const float w = in && p.weight ? ld_any(p.weight, p.weight_dtype, j) : 1.f;
            const float b = in && p.bias ? ld_any(p.bias, p.weight_dtype, j) : 0.f;
            const float s1 = in ? 1.f + to_f(scale[grp * p.scale_stride + j]) : 0.f;
            const float t = in ? to_f(shift[grp * p.shift_stride + j]) : 0.f;
            o[e] = (xv[e] - m - cm) * rstd * (w * s1) + (b * s1 + t);
          }
        }
        store_vec<T>(y + r * p.y_stride, rm, kOpY, vp, o);
      }
    }
  }
}

}  // namespace
}  // namespace adaln_cuda
}  // namespace adaptiveload
