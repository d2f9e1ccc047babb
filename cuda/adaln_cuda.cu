// Fused LayerNorm-Modulate (adaLN) forward and backward, CUDA.
//
//   y = ((x - mean) * rstd * w + b) * (1 + scale) + shift        (see adaln.h for the math)
//
// Layout of the work (forward and backward alike):
//   - a "team" of ts threads owns one row at a time; each thread holds VPT vectors of 8
//     elements of the row in registers (vector v = i * ts + lane, see RowMap), so
//     the row is read from memory exactly once: 1-2 vectors in teams of up to 512 threads,
//     or one in teams of up to 1024 (the wide kernels, D 4097 - 8192); loads and stores
//     are 128-bit for the 16-byte aligned bulk of each row in every operand that agrees
//     on where it starts, per element for the head, the tail and the other operands
//     (RowMap); rows wider than 8192 are looped over by one team (adaln_*_loop_kernel);
//   - the forward loads the whole vectors of a team's next row while it reduces the
//     current one (software prefetch into registers);
//   - statistics are two-pass in fp32 from registers (mean, then the corrected sum of
//     squared deviations), reduced with warp shuffles (ts <= 32: sub-warp teams, several
//     rows per warp) or shuffles + shared memory (ts > 32);
//   - a block holds rpb teams (about 256 threads) and walks "chunks" of C = rpb * R rows
//     that never straddle a sample, so per-sample modulation is loaded once per chunk
//     into registers; blocks take chunks in a grid-stride loop (1D grid, any row count)
//     of as many blocks as the device holds at once (occupancy x SMs, make_cfg), about
//     one chunk each;
//   - backward: the same single pass over x and dy writes dx and accumulates dscale /
//     dshift (per-sample) and dweight / dbias in registers over the chunk; the teams of
//     a block combine through shared memory in team order and write two fp32 partial rows
//     per chunk to the workspace; one finalize launch then sums the partials of each sample
//     (and of all chunks for dweight / dbias) in a fixed order, coalesced over a D tile,
//     its rows cut into segments for enough blocks (adaln_finalize_kernel). No atomics on
//     data (a ticket counter picks the block that adds the segments, not the order); C
//     depends only on the shape and the device model, so results are bit-identical run to
//     run on one GPU model.
//
// Build: part of adaptiveload_cuda (cuda/CMakeLists.txt) or scripts/gpu_check.sh.
// Test:  adaptiveload_cuda_tests.  Bench: bench_adaln_cuda.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "adaln_cuda.h"

namespace adaptiveload {
namespace {

constexpr int kEpv = 8;        // elements per vector (16 bytes of 16-bit data)
constexpr int kMaxTeam = 512;    // threads per row (and per block): 128 registers a thread
constexpr int kWideTeam = 1024;  // one vector a thread: 64 registers a thread
constexpr int kBlockTarget = 256;

// ---------------------------------------------------------------- element conversions

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}

// Runtime-dtype scalar access, for the rarely touched [D] / [B, D] operands.
__device__ __forceinline__ float ld_any(const void* p, DType t, int64_t i) {
  if (t == DType::F32) return __ldg(static_cast<const float*>(p) + i);
  const unsigned short raw = __ldg(static_cast<const unsigned short*>(p) + i);
  return t == DType::BF16 ? __bfloat162float(__ushort_as_bfloat16(raw))
                          : __half2float(__ushort_as_half(raw));
}
__device__ __forceinline__ void st_any(void* p, DType t, int64_t i, float v) {
  if (t == DType::F32)
    static_cast<float*>(p)[i] = v;
  else if (t == DType::BF16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<__half*>(p)[i] = __float2half_rn(v);
}

// ---------------------------------------------------------------- 8-element vectors

template <typename T>
struct Vec8;

template <>
struct Vec8<float> {
  static __device__ __forceinline__ void load(const float* p, float (&v)[kEpv]) {
    const float4 a = reinterpret_cast<const float4*>(p)[0],
                 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
  static __device__ __forceinline__ void store(float* p, const float (&v)[kEpv]) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
    __stcs(reinterpret_cast<float4*>(p) + 1, make_float4(v[4], v[5], v[6], v[7]));
  }
};

template <>
struct Vec8<__nv_bfloat16> {
  static __device__ __forceinline__ void load(const __nv_bfloat16* p, float (&v)[kEpv]) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      v[2 * k] = f.x, v[2 * k + 1] = f.y;
    }
  }
  static __device__ __forceinline__ void store(__nv_bfloat16* p, const float (&v)[kEpv]) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    __stcs(reinterpret_cast<uint4*>(p), u);
  }
};

template <>
struct Vec8<__half> {
  static __device__ __forceinline__ void load(const __half* p, float (&v)[kEpv]) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __half22float2(h[k]);
      v[2 * k] = f.x, v[2 * k + 1] = f.y;
    }
  }
  static __device__ __forceinline__ void store(__half* p, const float (&v)[kEpv]) {
    uint4 u;
    __half2* h = reinterpret_cast<__half2*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
    __stcs(reinterpret_cast<uint4*>(p), u);
  }
};

// Row operands, as bits of RowMap::ok (adaln_cuda.h): the operands whose whole vectors
// are moved 128 bits at a time.
constexpr unsigned kOpX = kAdalnOpX, kOpY = kAdalnOpY, kOpDy = kAdalnOpDy, kOpDx = kAdalnOpDx;
constexpr unsigned kOpScale = kAdalnOpScale, kOpShift = kAdalnOpShift;
constexpr unsigned kOpDscale = kAdalnOpDscale, kOpDshift = kAdalnOpDshift;

// Vector layout of every row (row_map on the host). With `vec`: `head` columns up to the
// column where the rows of the operands in `ok` reach a 16-byte boundary, then `full`
// whole vectors (8 columns each, 16-byte aligned in every row of the operands of `ok`,
// which move them 128 bits at a time; the other operands element by element), then the
// tail. Head and tail are moved element by element; that is at most one vector more than
// ceil(D / 8). Without `vec` (no operand has a 16-byte row stride reaching 16 bytes at a
// column the team has room for) vector v is columns 8v .. 8v + 7, all moved element by
// element. count: the vectors of a row.
struct RowMap {
  int64_t D = 0, head = 0, full = 0, count = 0;
  unsigned ok = 0;  // AdalnRowOperand bits
  bool vec = false;
};

// Where vector v of a row lies: elements e < nv, at columns c0 + e. A whole vector (8
// columns past the head) has nv = 8. Columns are 32-bit (D < 2^31, adaln_cuda_max_dim):
// one register less per vector.
struct VecPos {
  int c0;
  int nv;
};
__device__ __forceinline__ VecPos vec_pos(const RowMap& m, int64_t v) {
  VecPos r;
  if (!m.vec) {
    const int64_t c0 = v * kEpv;
    r.c0 = int(c0 < m.D ? c0 : m.D);
    r.nv = int(m.D - c0 <= 0 ? 0 : (m.D - c0 < kEpv ? m.D - c0 : kEpv));
    return r;
  }
  const int64_t h1 = m.head > 0 ? 1 : 0, w = v - h1;
  if (w < 0) {  // the head
    r.c0 = 0;
    r.nv = int(m.head);
  } else if (w < m.full) {
    r.c0 = int(m.head + w * kEpv);
    r.nv = kEpv;
  } else {  // the tail, then nothing
    r.c0 = int(m.head + m.full * kEpv);
    r.nv = w == m.full ? int(m.D - r.c0) : 0;
  }
  return r;
}
__device__ __forceinline__ int64_t col_at(const RowMap&, const VecPos& v, int e) {
  return int64_t(v.c0) + e;
}
// Vector v moves 128 bits at a time in operand `op` (a head of 8 columns is not whole).
__device__ __forceinline__ bool whole(const RowMap& m, unsigned op, const VecPos& v) {
  return (m.ok & op) != 0 && v.nv == kEpv;
}

// The raw bits of one whole 8-element vector (16 bytes of 16-bit data, 32 of fp32): what
// the forward keeps of the next row while it reduces the current one.
template <typename T>
struct RawVec {
  uint4 u[sizeof(T) / 2];
};

// Vector v of the row at `row` of operand `op` (0: element by element); zeros outside
// the row or when !valid.
template <typename T>
__device__ __forceinline__ void load_vec(const T* row, const RowMap& m, unsigned op,
                                         const VecPos& v, bool valid, float (&o)[kEpv]) {
  if (valid && whole(m, op, v)) {
    Vec8<T>::load(row + v.c0, o);
    return;
  }
  const int n = valid ? v.nv : 0;
#pragma unroll
  for (int e = 0; e < kEpv; ++e) o[e] = e < n ? to_f(row[col_at(m, v, e)]) : 0.f;
}
template <typename T>
__device__ __forceinline__ void store_vec(T* row, const RowMap& m, unsigned op, const VecPos& v,
                                          const float (&o)[kEpv]) {
  if (whole(m, op, v)) {
    Vec8<T>::store(row + v.c0, o);
    return;
  }
#pragma unroll
  for (int e = 0; e < kEpv; ++e)
    if (e < v.nv) row[col_at(m, v, e)] = from_f<T>(o[e]);
}

// ---------------------------------------------------------------- team reductions

// Work layout shared by the kernels, computed on the host (make_cfg).
struct Cfg {
  int ts = 1;       // threads per row (power of two <= 32, or a multiple of 32)
  int rpb = 1;      // rows (teams) per block
  int vpt = 1;      // vectors per thread; 0: the looped kernels (D > 8192)
  int64_t R = 1;    // rows per team per chunk
  int64_t C = 1;    // rows per chunk = rpb * R
  int64_t L = 0;    // rows per group (sample; all rows when per-token)
  int64_t cps = 0;  // chunks per group
  int64_t groups = 0;
  int64_t K = 0;    // chunks in all
  int64_t G = 512;  // blocks launched at most: resident on the device at once
  int64_t sms = 0;  // SMs of the current device (0: unknown)
  // The grid-stride step of the launched grid in groups and chunks (ChunkWalk).
  int64_t kstep_grp = 0, kstep_in = 0;
  // Sample teams (per-sample modulation, samples shorter than a chunk): a chunk is spc
  // whole samples, team t of the block takes samples t, t + rpb, ... of it, R = (spc / rpb)
  // L rows; the backward writes each sample's dscale / dshift from the team's registers and
  // keeps one pair of partial rows a chunk for dweight / dbias. 0: chunks of rows (above).
  int64_t spc = 0;
};

// Sum over the ts threads of a team; all threads of the block must call it together.
// red: shared [2][32] floats, `slot` alternates so back-to-back calls need one barrier.
template <int N>
__device__ __forceinline__ void team_sum(float (&v)[N], int ts, float (*red)[32][N], int slot) {
  if (ts <= 32) {
    for (int o = ts >> 1; o > 0; o >>= 1)
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
    return;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
  const int warp = threadIdx.x >> 5, wpt = ts >> 5, first = warp / wpt * wpt;
  if ((threadIdx.x & 31) == 0)
#pragma unroll
    for (int k = 0; k < N; ++k) red[slot][warp][k] = v[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < N; ++k) {
    float s = 0.f;
    for (int w = 0; w < wpt; ++w) s += red[slot][first + w][k];
    v[k] = s;
  }
}

struct Args {
  AdalnParams p;
  Cfg c;
  // Workspace slots (floats, -1 = absent): the chunk partials S2 and S1 ([K, D] each), the
  // finalize's segment rows ([2, nseg, D]) and its tickets (ntk unsigned), see ws_layout.
  int64_t off_s, off_t, off_q, off_k;
  RowMap m;
  int64_t ntk = 0;  // finalize tickets the backward kernel zeroes (block 0)
};

// The finalize's tickets start at zero: block 0 of the backward kernel, which runs before
// the finalize on the same stream, clears them (the workspace comes uninitialised).
__device__ __forceinline__ void zero_tickets(const Args& a) {
  if (a.ntk == 0 || blockIdx.x != 0) return;
  unsigned* tk = reinterpret_cast<unsigned*>(static_cast<float*>(a.p.workspace) + a.off_k);
  for (int64_t i = threadIdx.x; i < a.ntk; i += blockDim.x) tk[i] = 0u;
}

// A block's grid-stride walk over the chunks: chunk k is chunk kin of group grp, stepped
// without a 64-bit division (a subroutine call in SASS, whose saved registers spilled in
// the 64-register kernels): the host gives the step in groups and chunks (Cfg::kstep_*).
struct ChunkWalk {
  int64_t k, grp, kin;
  __device__ explicit ChunkWalk(const Cfg& c) : k(blockIdx.x), grp(0), kin(blockIdx.x) {
    if (c.cps > 0 && c.cps <= int64_t(blockIdx.x)) {  // then cps < 2^31
      grp = int64_t(unsigned(blockIdx.x) / unsigned(c.cps));
      kin = k - grp * c.cps;
    }
  }
  __device__ void next(const Cfg& c) {
    k += gridDim.x;
    grp += c.kstep_grp;
    kin += c.kstep_in;
    if (kin >= c.cps) kin -= c.cps, ++grp;
  }
};

// Group and rows [r0, r1) of the walk's chunk.
__device__ __forceinline__ void chunk_rows(const Cfg& c, const ChunkWalk& w, int64_t& grp,
                                           int64_t& r0, int64_t& r1) {
  grp = w.grp;
  r0 = grp * c.L + w.kin * c.C;
  const int64_t end = (grp + 1) * c.L;
  r1 = r0 + c.C < end ? r0 + c.C : end;
}

// ---------------------------------------------------------------- forward

// ST: sample teams (Cfg::spc > 0), a separate instance so that the chunks-of-rows one keeps
// its registers. WIDE: one vector a thread in teams of up to kWideTeam threads (the
// kernel adaln_fwd_wide_kernel, 64 registers a thread).
template <typename T, typename TM, int VPT, bool ST, bool WIDE>
__device__ __forceinline__ void adaln_fwd_rows(const Args& a) {
  const AdalnParams& p = a.p;
  const Cfg& c = a.c;
  __shared__ float red[2][32][2];
  const int ts = c.ts, team = threadIdx.x / ts, lane = threadIdx.x - team * ts;
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
  for (ChunkWalk cw(c); cw.k < c.K; cw.next(c)) {
    const int64_t k = cw.k;
    int64_t grp = 0, r0 = 0, r1 = 0, l = -1;  // sample teams: grp this team's sample, l its row
    if constexpr (!ST) {
      chunk_rows(c, cw, grp, r0, r1);
      if constexpr (!WIDE) fold(grp);
    } else {
      grp = k * c.spc + team;
      r1 = k * c.spc + c.spc < p.batch ? k * c.spc + c.spc : p.batch;  // samples end
    }
    // The team's rows in order. (rn, vn, gn): the next row, its validity and sample; its
    // whole vectors are loaded into nx while the current row is reduced (software
    // prefetch: the loads are in flight across the reductions' shuffles and barriers).
    int64_t rn = 0, gn = grp;
    bool vn = false;
    auto advance = [&](int64_t it) {
      if constexpr (!ST) {
        rn = r0 + team + it * c.rpb;
        vn = rn < r1;
      } else {
        if (++l == c.L) l = 0, grp += c.rpb;
        gn = grp;
        vn = grp < r1;
        rn = grp * c.L + l;
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
    for (int64_t it = 0; it < c.R; ++it) {
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
      if (it + 1 < c.R) {  // uniform per team
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
          load_vec<TM>(scale + (tok ? r : g) * p.scale_stride, rm, tok ? kOpScale : 0u, vp[i], true, sv);
          load_vec<TM>(shift + (tok ? r : g) * p.shift_stride, rm, tok ? kOpShift : 0u, vp[i], true, tv);
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

// ---------------------------------------------------------------- backward

template <typename T, typename TM, int VPT, bool AFFINE, bool ST, bool WIDE>
__device__ __forceinline__ void adaln_bwd_rows(const Args& a) {
  const AdalnParams& p = a.p;
  const Cfg& c = a.c;
  __shared__ float red[2][32][2];
  extern __shared__ float part[];  // [rpb][D] when rpb > 1; sample teams: [rpb][2][D]
  const int ts = c.ts, team = threadIdx.x / ts, lane = threadIdx.x - team * ts;
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
  for (ChunkWalk cw(c); cw.k < c.K; cw.next(c)) {
    const int64_t k = cw.k;
    int64_t grp = 0, r0 = 0, r1 = 0, l = -1;  // sample teams: grp this team's sample, l its row
    if constexpr (!ST) {
      chunk_rows(c, cw, grp, r0, r1);
    } else {
      grp = k * c.spc + team;
      r1 = k * c.spc + c.spc < p.batch ? k * c.spc + c.spc : p.batch;  // samples end
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
    for (int64_t it = 0; it < c.R; ++it) {
      int64_t r;
      bool valid;
      if constexpr (!ST) {
        r = r0 + team + it * c.rpb;
        valid = r < r1;
      } else {
        if (++l == c.L) l = 0, grp += c.rpb;
        valid = grp < r1;
        r = grp * c.L + l;
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
      if (ST && l == c.L - 1 && acc) {
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
          for (int t = 0; t < c.rpb; ++t)
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
      if (WIDE || c.rpb == 1) {  // the wide kernels: one team a block
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
        for (int t = 0; t < c.rpb; ++t) s += part[t * D + j];
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
  const int ts = c.ts, lane = threadIdx.x;
  const int64_t D = p.dim, nvec = a.m.count;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const TM* scale = static_cast<const TM*>(p.scale);
  const TM* shift = static_cast<const TM*>(p.shift);
  const RowMap& rm = a.m;
  for (ChunkWalk cw(c); cw.k < c.K; cw.next(c)) {
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
  const int ts = c.ts, lane = threadIdx.x;
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
  for (ChunkWalk cw(c); cw.k < c.K; cw.next(c)) {
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
//               does the kFinSamples work over the segments (nsg rows a sample).
enum FinMode : int { kFinRows = 0, kFinSamples = 1, kFinSplit = 2 };

struct FinPlan {
  int mode = kFinRows;
  int64_t ntiles = 0;  // column tiles of 32 (grid x)
  int64_t nseg = 1;    // segments (grid y); > 1: segment rows and tickets in the workspace
  int64_t span = 0;    // rows (kFinRows), samples (kFinSamples) or chunks (kFinSplit) a segment
  int64_t nsg = 1;     // kFinSplit: segments a sample
};

struct FinArgs {
  AdalnParams p;
  FinPlan f;
  int64_t K, cps, groups;  // chunks, chunks a sample, samples (1 per-token)
  const float *p1, *p2;    // [K, D] chunk partials S1, S2
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

__global__ void __launch_bounds__(512) adaln_finalize_kernel(const FinArgs f) {
  __shared__ float sm[2][16][33];
  __shared__ int last;
  const AdalnParams& p = f.p;
  const int64_t D = p.dim, j = int64_t(blockIdx.x) * 32 + threadIdx.x, s = blockIdx.y;
  const FinPlan& pl = f.f;
  float t1, t2;  // this segment's dbias, dweight sums (kFinSplit: its raw S1, S2)
  if (pl.mode == kFinRows) {
    fin_rows(f.p1, f.p2, s * pl.span, min64(f.K, (s + 1) * pl.span), D, j, sm, t1, t2);
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

// ---------------------------------------------------------------- host side

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("adaln CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// An error left pending by earlier CUDA work would otherwise be reported as the failure
// of this call's first launch: take it now (cudaGetLastError clears it) and say whose it is.
void check_pending(const char* call) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(
        std::string("adaln CUDA: ") + call +
        ": a CUDA error from earlier work was pending before the launch (not raised by adaLN): " +
        cudaGetErrorString(e));
}

int pow2_ceil(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Team, vectors a thread and teams a block for D (the kernel instance); make_chunks then
// cuts the rows. Rows of up to 1024 vectors (D <= 8192) sit in one team's registers:
// above 512 vectors one vector a thread in a team of up to 1024 threads (the wide
// kernels; not the affine backward, which spilled 32-36 bytes at their 64 registers, so
// it keeps 2 vectors a thread in teams of up to 512); up to 512 the least padding,
// preferring 2 vectors a thread (more loads in flight), except for the affine backward,
// whose accumulators plus weight and bias would spill at 2 when 1 fits in a team.
Cfg make_layout(const AdalnParams& p, bool bwd) {
  Cfg c;
  const int64_t nvec = (p.dim + kEpv - 1) / kEpv;
  const bool affine = p.weight || p.bias;
  if (nvec > int64_t(kWideTeam)) {  // looped kernels: one team of kMaxTeam a block
    c.ts = kMaxTeam;
    c.vpt = 0;
  } else if (nvec > int64_t(kMaxTeam) && !(bwd && affine)) {
    c.ts = int((nvec + 31) / 32 * 32);
    c.vpt = 1;
  } else {
    const bool prefer1 = bwd && affine;
    int64_t best_waste = -1;
    for (int vpt : {prefer1 ? 1 : 2, prefer1 ? 2 : 1}) {
      const int64_t raw = (nvec + vpt - 1) / vpt;
      const int64_t ts = raw <= 32 ? pow2_ceil(int(std::max<int64_t>(raw, 1))) : (raw + 31) / 32 * 32;
      if (ts > kMaxTeam) continue;
      const int64_t waste = ts * vpt - nvec;
      if (best_waste < 0 || waste < best_waste) {
        best_waste = waste;
        c.ts = int(ts);
        c.vpt = vpt;
      }
    }
  }
  c.rpb = c.ts >= kBlockTarget ? 1 : kBlockTarget / c.ts;
  return c;
}

// The wide kernels (teams of more than kMaxTeam threads, one vector a thread).
bool wide(const Cfg& c) { return c.vpt == 1 && c.ts > kMaxTeam; }

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows per chunk for G resident blocks: one chunk a block where the samples allow (a
// chunk never straddles one), so the grid fills the device once and the backward writes
// few partial rows; at most 256 rows a team (more chunks than blocks beyond that).
// Backward: a chunk's two fp32 partial rows cost 16 bytes a column (written, then read by
// the finalize); at least kPartialShare times that in row traffic (x, dy, dx and per-token
// modulation in and out) a chunk, i.e. partials at most 1/8 of it, unless that leaves
// fewer chunks than SMs (small N): then one chunk an SM, C >= N / SMs.
constexpr int64_t kPartialShare = 8;
void make_chunks(const AdalnParams& p, int64_t G, bool bwd, Cfg& c) {
  const int64_t N = p.rows;
  c.G = std::max<int64_t>(G, 1);
  c.L = p.per_token ? N : p.rows_per_sample;
  c.groups = p.per_token ? (N > 0 ? 1 : 0) : p.batch;
  int64_t R = std::clamp<int64_t>(cdiv(N, c.G * c.rpb), 1, 256);
  if (bwd && N > 0) {
    const int64_t row_bytes = 3 * int64_t(dtype_size(p.x_dtype)) +
                              (p.per_token ? 3 * int64_t(dtype_size(p.mod_dtype)) : 0);
    const int64_t cmin = cdiv(16 * kPartialShare, row_bytes);
    const int64_t spread = std::max<int64_t>(1, N / std::max<int64_t>(c.sms, 1));
    R = std::clamp<int64_t>(std::max(R, cdiv(std::min(cmin, spread), c.rpb)), 1, 256);
  }
  c.spc = 0;
  if (!p.per_token && c.vpt > 0 && c.L >= 1 && c.L < c.rpb * R) {
    // Samples shorter than the chunk wanted: chunks of whole samples, one team a sample,
    // instead of chunks cut at every sample (idle teams, a pair of partial rows a sample).
    const int64_t per_team = std::clamp<int64_t>(cdiv(R, c.L), 1, std::max<int64_t>(1, 256 / c.L));
    c.spc = c.rpb * per_team;
    c.R = per_team * c.L;
    c.C = c.spc * c.L;
    c.cps = 1;
    c.K = cdiv(c.groups, c.spc);
    return;
  }
  R = std::min<int64_t>(R, std::max<int64_t>(1, cdiv(c.L, c.rpb)));
  c.R = R;
  c.C = c.rpb * R;
  c.cps = c.L > 0 ? (c.L + c.C - 1) / c.C : 0;
  c.K = c.groups * c.cps;
}

void check_cuda_limits(const AdalnParams& p) {
  if (p.dim > adaln_cuda_max_dim())
    throw std::invalid_argument("AdalnParams.dim (" + std::to_string(p.dim) +
                                ") exceeds the CUDA kernels' limit of " +
                                std::to_string(adaln_cuda_max_dim()) + " (32-bit columns)");
  if (p.mod_dtype != DType::F32 && p.mod_dtype != p.x_dtype)
    throw std::invalid_argument(std::string("AdalnParams.mod_dtype (") + dtype_name(p.mod_dtype) +
                                ") must be f32 or equal to x_dtype (" + dtype_name(p.x_dtype) +
                                ") for the CUDA kernels");
}

// The vector layout of the rows (RowMap). An operand can move whole vectors when its
// elements are aligned, its row stride is a multiple of 16 bytes and its rows reach 16
// bytes at the head column; the head is the column (0-7, with a whole vector after it)
// that lets the most bytes of a row move that way (x's own head on a tie, then the
// smallest). The others move element by element at the same columns.
RowMap row_map(const AdalnParams& p, const Cfg& c, bool bwd) {
  RowMap m;
  m.D = p.dim;
  m.count = (p.dim + kEpv - 1) / kEpv;
  struct Op {
    const void* ptr;
    int64_t stride;
    size_t sz;
    unsigned bit;
  };
  const size_t es = dtype_size(p.x_dtype), em = dtype_size(p.mod_dtype);
  Op ops[6];
  int n = 0;
  auto add = [&](const void* ptr, int64_t stride, size_t sz, unsigned bit) {
    if (ptr) ops[n++] = Op{ptr, stride, sz, bit};
  };
  add(p.x, p.x_stride, es, kOpX);
  if (bwd) {
    add(p.dy, p.dy_stride, es, kOpDy);
    add(p.dx, p.dx_stride, es, kOpDx);
  } else {
    add(p.y, p.y_stride, es, kOpY);
  }
  if (p.per_token) {
    add(p.scale, p.scale_stride, em, kOpScale);
    if (bwd) {
      add(p.dscale, p.dscale_stride, em, kOpDscale);
      add(p.dshift, p.dshift_stride, em, kOpDshift);
    } else {
      add(p.shift, p.shift_stride, em, kOpShift);
    }
  }
  auto fits = [](const Op& o, int64_t h) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(o.ptr);
    return a % o.sz == 0 && (o.stride * int64_t(o.sz)) % 16 == 0 && (a + uintptr_t(h) * o.sz) % 16 == 0;
  };
  const uintptr_t ax = reinterpret_cast<uintptr_t>(p.x);
  const int64_t hx = ax % es == 0 ? int64_t((16 - ax % 16) % 16 / es) : 0;
  int64_t best_h = 0;
  unsigned best = 0;
  size_t best_bytes = 0;
  for (int64_t k = -1; k < kEpv; ++k) {
    const int64_t h = k < 0 ? hx : k;
    const int64_t full = (p.dim - h) / kEpv, count = (h > 0) + full + (p.dim - h - full * kEpv > 0);
    if (full == 0 || (c.vpt > 0 && count > int64_t(c.ts) * c.vpt)) continue;  // room in the team
    unsigned bits = 0;
    size_t bytes = 0;
    for (int i = 0; i < n; ++i)
      if (fits(ops[i], h)) bits |= ops[i].bit, bytes += ops[i].sz;
    if (bytes > best_bytes) best_h = h, best = bits, best_bytes = bytes;
  }
  if (best == 0) return m;
  const int64_t full = (p.dim - best_h) / kEpv, tail = p.dim - best_h - full * kEpv;
  m.vec = true;
  m.ok = best;
  m.head = best_h;
  m.full = full;
  m.count = (best_h > 0) + full + (tail > 0);
  return m;
}

// The finalize's plan (see adaln_finalize_kernel): enough (32, 16) blocks for two an SM
// over the column tiles, and segments of 16 - 256 rows (1 - 16 serial loads a thread).
FinPlan fin_plan(const AdalnParams& p, const Cfg& c) {
  FinPlan f;
  f.ntiles = cdiv(p.dim, 32);
  const int64_t target = 2 * (c.sms > 0 ? c.sms : 132);
  const int64_t want = f.ntiles > 0 ? cdiv(target, f.ntiles) : 1;  // segments for `target`
  auto segments = [&](int64_t rows, int64_t most) {                // >= 1, <= most (when most >= 1)
    const int64_t hi = std::max<int64_t>(1, std::min<int64_t>({cdiv(rows, 16), most, 65535}));
    return std::clamp<int64_t>(std::max(want, cdiv(rows, 256)), 1, hi);
  };
  if (p.per_token || c.spc > 0) {  // sample teams: dscale / dshift written already
    f.mode = kFinRows;
    f.span = std::max<int64_t>(1, cdiv(c.K, segments(c.K, c.K)));
    f.nseg = c.K > 0 ? cdiv(c.K, f.span) : 1;
    return f;
  }
  const int64_t B = c.groups, cps = c.cps;
  // Split a sample only when each of its segments still has 16 chunks or more.
  const int64_t nsg = B > 0 ? std::min(cdiv(want, B), cps / 16) : 0;
  if (nsg >= 2) {
    f.mode = kFinSplit;
    f.span = cdiv(cps, nsg);
    f.nsg = cdiv(cps, f.span);
    f.nseg = B * f.nsg;
    return f;
  }
  f.mode = kFinSamples;
  f.span = std::max<int64_t>(1, cdiv(B, segments(B * cps, B)));
  f.nseg = B > 0 ? cdiv(B, f.span) : 1;
  return f;
}

// Workspace slot offsets (floats) into a; returns the total floats. off_t / off_s: the
// backward kernel's two accumulators, one fp32 partial row per chunk each ([K, D]); with
// more than one finalize segment (and something to add over them) off_q: [2, nseg, D]
// segment sums, off_k: one unsigned ticket a column tile.
int64_t ws_layout(const AdalnParams& p, const Cfg& c, const FinPlan& f, Args& a) {
  a.off_s = a.off_t = a.off_q = a.off_k = -1;
  a.ntk = 0;
  const bool total = p.dweight || p.dbias;
  if (!(p.per_token || c.spc > 0 ? total : (total || p.dscale || p.dshift))) return 0;
  int64_t n = 0;
  const int64_t slot = c.K * p.dim;
  a.off_t = n, n += slot;
  a.off_s = n, n += slot;
  if (f.nseg > 1 && (f.mode != kFinSamples || total)) {
    a.off_q = n, n += 2 * f.nseg * p.dim;
    a.off_k = n, n += f.ntiles;  // unsigned, one a float slot
    a.ntk = f.ntiles;
  }
  return n;
}

int grid_for(const Cfg& c) { return int(std::min<int64_t>({c.K, c.G, int64_t(1) << 30})); }

template <typename T, typename TM>
void launch_fwd(const Args& a, cudaStream_t st) {
  const dim3 grid(grid_for(a.c)), block(a.c.ts * a.c.rpb);
  if (a.c.vpt == 0)
    adaln_fwd_loop_kernel<T, TM><<<grid, block, 0, st>>>(a);
  else if (wide(a.c) && a.c.spc > 0)
    adaln_fwd_wide_kernel<T, TM, true><<<grid, block, 0, st>>>(a);
  else if (wide(a.c))
    adaln_fwd_wide_kernel<T, TM, false><<<grid, block, 0, st>>>(a);
  else if (a.c.vpt == 2 && a.c.spc > 0)
    adaln_fwd_kernel<T, TM, 2, true><<<grid, block, 0, st>>>(a);
  else if (a.c.vpt == 2)
    adaln_fwd_kernel<T, TM, 2, false><<<grid, block, 0, st>>>(a);
  else if (a.c.spc > 0)
    adaln_fwd_kernel<T, TM, 1, true><<<grid, block, 0, st>>>(a);
  else
    adaln_fwd_kernel<T, TM, 1, false><<<grid, block, 0, st>>>(a);
  check_launch("forward kernel");
}

// Dynamic shared memory of adaln_bwd_kernel: the teams' partial rows ([rpb][D] when
// rpb > 1), with sample teams and dweight / dbias two a team ([rpb][2][D]; up to 64 KiB at
// D = 8192, one team a block).
size_t bwd_smem(const AdalnParams& p, const Cfg& c) {
  if (c.vpt == 0) return 0;
  const size_t rows = c.spc > 0 ? ((p.dweight || p.dbias) ? 2 * size_t(c.rpb) : 0)
                                : (c.rpb > 1 ? size_t(c.rpb) : 0);
  const size_t sacc = wide(c) ? 2 * size_t(kEpv) * size_t(c.ts) : 0;  // the wide kernels' sums
  return (rows * size_t(p.dim) + sacc) * sizeof(float);
}

// Above 48 KiB of dynamic shared memory a kernel must opt in.
template <typename K>
void allow_smem(K* kernel, size_t smem) {
  if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(smem)) != cudaSuccess)
    check_launch("backward kernel (shared memory opt-in)");
}

template <typename T, typename TM, bool AFFINE>
void launch_bwd_affine(const Args& a, cudaStream_t st) {
  const dim3 grid(grid_for(a.c)), block(a.c.ts * a.c.rpb);
  const size_t smem = bwd_smem(a.p, a.c);
  if (a.c.vpt == 0) {
    adaln_bwd_loop_kernel<T, TM, AFFINE><<<grid, block, 0, st>>>(a);
  } else if (wide(a.c)) {  // not affine (make_layout)
    if constexpr (!AFFINE) {
      if (a.c.spc > 0) {
        allow_smem(adaln_bwd_wide_kernel<T, TM, true>, smem);
        adaln_bwd_wide_kernel<T, TM, true><<<grid, block, smem, st>>>(a);
      } else {
        allow_smem(adaln_bwd_wide_kernel<T, TM, false>, smem);
        adaln_bwd_wide_kernel<T, TM, false><<<grid, block, smem, st>>>(a);
      }
    }
  } else if (a.c.vpt == 2 && a.c.spc > 0) {
    allow_smem(adaln_bwd_kernel<T, TM, 2, AFFINE, true>, smem);
    adaln_bwd_kernel<T, TM, 2, AFFINE, true><<<grid, block, smem, st>>>(a);
  } else if (a.c.vpt == 2) {
    adaln_bwd_kernel<T, TM, 2, AFFINE, false><<<grid, block, smem, st>>>(a);
  } else if (a.c.spc > 0) {
    allow_smem(adaln_bwd_kernel<T, TM, 1, AFFINE, true>, smem);
    adaln_bwd_kernel<T, TM, 1, AFFINE, true><<<grid, block, smem, st>>>(a);
  } else {
    adaln_bwd_kernel<T, TM, 1, AFFINE, false><<<grid, block, smem, st>>>(a);
  }
  check_launch("backward kernel");
}

// Blocks of `kernel` the current device holds at once (occupancy x SMs); 0 when the
// runtime cannot say (no device).
template <typename K>
int64_t resident_blocks(K* kernel, int block, size_t smem) {
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, smem) != cudaSuccess)
    return 0;
  return int64_t(per_sm) * sms;
}

// SMs of the current device; 0 when the runtime cannot say.
int64_t device_sms() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  return sms;
}

// The kernel instance launch_fwd / launch_bwd_affine pick for c, for its occupancy.
template <typename T, typename TM>
int64_t resident_fwd(const Cfg& c) {
  const int block = c.ts * c.rpb;
  if (c.vpt == 0) return resident_blocks(adaln_fwd_loop_kernel<T, TM>, block, 0);
  if (wide(c) && c.spc > 0) return resident_blocks(adaln_fwd_wide_kernel<T, TM, true>, block, 0);
  if (wide(c)) return resident_blocks(adaln_fwd_wide_kernel<T, TM, false>, block, 0);
  if (c.vpt == 2 && c.spc > 0) return resident_blocks(adaln_fwd_kernel<T, TM, 2, true>, block, 0);
  if (c.vpt == 2) return resident_blocks(adaln_fwd_kernel<T, TM, 2, false>, block, 0);
  if (c.spc > 0) return resident_blocks(adaln_fwd_kernel<T, TM, 1, true>, block, 0);
  return resident_blocks(adaln_fwd_kernel<T, TM, 1, false>, block, 0);
}
template <typename T, typename TM, bool AFFINE>
int64_t resident_bwd(const Cfg& c, const AdalnParams& p) {
  const int block = c.ts * c.rpb;
  const size_t smem = bwd_smem(p, c);
  if (c.vpt == 0) return resident_blocks(adaln_bwd_loop_kernel<T, TM, AFFINE>, block, 0);
  if constexpr (!AFFINE) {  // the wide kernels: not affine (make_layout)
    if (wide(c) && c.spc > 0) return resident_blocks(adaln_bwd_wide_kernel<T, TM, true>, block, smem);
    if (wide(c)) return resident_blocks(adaln_bwd_wide_kernel<T, TM, false>, block, smem);
  }
  if (c.vpt == 2 && c.spc > 0)
    return resident_blocks(adaln_bwd_kernel<T, TM, 2, AFFINE, true>, block, smem);
  if (c.vpt == 2) return resident_blocks(adaln_bwd_kernel<T, TM, 2, AFFINE, false>, block, smem);
  if (c.spc > 0) return resident_blocks(adaln_bwd_kernel<T, TM, 1, AFFINE, true>, block, smem);
  return resident_blocks(adaln_bwd_kernel<T, TM, 1, AFFINE, false>, block, smem);
}

template <typename T, typename TM>
void launch_bwd(const Args& a, cudaStream_t st) {
  if (a.p.weight || a.p.bias)
    launch_bwd_affine<T, TM, true>(a, st);
  else
    launch_bwd_affine<T, TM, false>(a, st);
}

// Dispatch on (x dtype, mod dtype in {f32, x dtype}).
template <typename Fn>
void dispatch(const AdalnParams& p, Fn&& fn) {
  const bool mf = p.mod_dtype == DType::F32;
  switch (p.x_dtype) {
    case DType::F32:
      fn(float(), float());
      break;
    case DType::BF16:
      if (mf)
        fn(__nv_bfloat16(), float());
      else
        fn(__nv_bfloat16(), __nv_bfloat16());
      break;
    case DType::F16:
      if (mf)
        fn(__half(), float());
      else
        fn(__half(), __half());
      break;
    default:  // validate() admits only the three above on this path
      break;
  }
}

// The whole work layout: the kernel instance for D, then chunks for as many blocks as the
// current device holds of it (512 when the runtime cannot say).
Cfg make_cfg(const AdalnParams& p, bool bwd) {
  Cfg c = make_layout(p, bwd);
  // Blocks the device holds of the kernel instance `c` selects.
  auto resident = [&] {
    int64_t g = 0;
    dispatch(p, [&](auto t, auto tm) {
      using T = decltype(t);
      using TM = decltype(tm);
      if (!bwd)
        g = resident_fwd<T, TM>(c);
      else if (p.weight || p.bias)
        g = resident_bwd<T, TM, true>(c, p);
      else
        g = resident_bwd<T, TM, false>(c, p);
    });
    return g;
  };
  const int64_t G = resident();
  c.sms = device_sms();
  make_chunks(p, G > 0 ? G : 512, bwd, c);
  if (c.spc > 0) {  // sample teams: their own kernel instance (and shared memory)
    const int64_t G2 = resident();
    if (G2 > 0 && G2 != G) make_chunks(p, G2, bwd, c);
  }
  if (c.cps > 0) {
    c.kstep_grp = grid_for(c) / c.cps;
    c.kstep_in = grid_for(c) % c.cps;
  }
  return c;
}

}  // namespace

// Rows wider than 8192 take the looped kernels; columns are 32-bit in the kernels.
int64_t adaln_cuda_max_dim() { return std::numeric_limits<int32_t>::max() - kEpv; }

AdalnCudaRowLayout adaln_cuda_row_layout(const AdalnParams& p, bool backward) {
  validate(p, backward ? AdalnPass::Bwd : AdalnPass::Fwd);
  check_cuda_limits(p);
  const RowMap m = row_map(p, make_layout(p, backward), backward);
  AdalnCudaRowLayout r;
  r.vector_operands = m.ok;
  r.head = m.head;
  r.vectors = m.count;
  return r;
}

void adaln_fwd_cuda(const AdalnParams& p, void* stream) {
  validate(p, AdalnPass::Fwd);
  check_cuda_limits(p);
  if (p.rows == 0 || p.dim == 0) return;
  check_pending("adaln_fwd_cuda");
  Args a{p, make_cfg(p, false), -1, -1, -1, -1, {}};
  a.m = row_map(p, a.c, false);
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  dispatch(p, [&](auto t, auto tm) { launch_fwd<decltype(t), decltype(tm)>(a, st); });
}

size_t adaln_bwd_cuda_workspace_bytes(const AdalnParams& p) {
  Args a{p, make_cfg(p, true), -1, -1, -1, -1, {}};
  return size_t(ws_layout(p, a.c, fin_plan(p, a.c), a)) * sizeof(float);
}

AdalnCudaBwdPlan adaln_bwd_cuda_plan(const AdalnParams& p) {
  Args a{p, make_cfg(p, true), -1, -1, -1, -1, {}};
  const FinPlan f = fin_plan(p, a.c);
  ws_layout(p, a.c, f, a);
  AdalnCudaBwdPlan r;
  r.team = a.c.ts;
  r.vectors_per_thread = a.c.vpt;
  r.chunks = a.c.K;
  r.rows_per_chunk = a.c.C;
  r.blocks = grid_for(a.c);
  r.samples_per_chunk = a.c.spc;
  if (a.off_t >= 0 && p.dim > 0) {
    r.finalize_mode = f.mode;
    r.finalize_segments = f.nseg;
    r.finalize_blocks = f.ntiles * f.nseg;
    r.partial_bytes = 2 * 2 * a.c.K * p.dim * int64_t(sizeof(float));
  }
  return r;
}

void adaln_bwd_cuda(const AdalnParams& p, void* stream) {
  validate(p, AdalnPass::Bwd);
  check_cuda_limits(p);
  Args a{p, make_cfg(p, true), -1, -1, -1, -1, {}};
  a.m = row_map(p, a.c, true);
  const FinPlan f = fin_plan(p, a.c);
  const size_t need = size_t(ws_layout(p, a.c, f, a)) * sizeof(float);
  if (need > 0 && (p.workspace == nullptr || p.workspace_bytes < need))
    throw std::invalid_argument("AdalnParams.workspace: needs " + std::to_string(need) +
                                " bytes (got " + std::to_string(p.workspace_bytes) +
                                (p.workspace ? "" : ", null") +
                                "); size it with adaln_bwd_cuda_workspace_bytes()");
  check_pending("adaln_bwd_cuda");
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (a.c.K > 0)
    dispatch(p, [&](auto t, auto tm) { launch_bwd<decltype(t), decltype(tm)>(a, st); });
  if (a.off_t < 0 || p.dim == 0) return;  // no reduction over rows wanted
  float* ws = static_cast<float*>(p.workspace);
  const int64_t q = std::max<int64_t>(a.off_q, 0), nq = a.off_q >= 0 ? f.nseg * p.dim : 0;
  const FinArgs fa{p,
                   f,
                   a.c.K,
                   a.c.cps,
                   p.per_token ? 1 : p.batch,
                   ws + a.off_t,
                   ws + a.off_s,
                   ws + q,
                   ws + q + nq,
                   a.off_k >= 0 ? reinterpret_cast<unsigned*>(ws + a.off_k) : nullptr};
  const dim3 grid(unsigned(f.ntiles), unsigned(f.nseg)), block(32, 16);
  adaln_finalize_kernel<<<grid, block, 0, st>>>(fa);
  check_launch("finalize kernel");
}

}  // namespace adaptiveload
