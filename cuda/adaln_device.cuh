// Device helpers shared by the adaLN kernel families (adaln_fwd_kernels.cuh,
// adaln_bwd_kernels.cuh): element conversions, 8-element vectors and where a thread's
// vectors lie in a row (RowMap, from row_map on the host), team reductions, the blocks'
// grid-stride walk over chunks of rows. Everything here is inlined into the kernels.
//
// Included by the instantiation files only (adaln_{fwd,bwd}_{f32,bf16,f16}.cu): the
// unnamed namespace keeps each file's kernels and helpers to itself, as in one file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "adaln_cuda.h"
#include "adaln_launch_plan.h"

namespace adaptiveload {
namespace adaln_cuda {
namespace {

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

// Offset i (0 <= i <= n) of the device cu_seqlens (segments), int32 or int64.
__device__ __forceinline__ int64_t cu_at(const AdalnParams& p, int64_t i) {
  if (p.cu_seqlens_i64) return int64_t(__ldg(static_cast<const long long*>(p.cu_seqlens) + i));
  return int64_t(__ldg(static_cast<const int*>(p.cu_seqlens) + i));
}

// The finalize's tickets start at zero: block 0 of the backward kernel, which runs before
// the finalize on the same stream, clears them (the workspace comes uninitialised).
__device__ __forceinline__ void zero_tickets(const Args& a) {
  if (a.ntk == 0 || blockIdx.x != 0) return;
  unsigned* tk = reinterpret_cast<unsigned*>(static_cast<float*>(a.p.workspace) + a.off_k);
  for (int64_t i = threadIdx.x; i < a.ntk; i += blockDim.x) tk[i] = 0u;
}

// A block's grid-stride walk over the chunks: chunk k is chunk kin of group grp, stepped
// without a 64-bit division (a subroutine call in SASS, whose saved registers spilled in
// the 64-register kernels): the host gives the step in groups and chunks (Cfg::grid_step_*).
struct ChunkWalk {
  int64_t k, grp, kin;
  __device__ explicit ChunkWalk(const Cfg& c) : k(blockIdx.x), grp(0), kin(blockIdx.x) {
    if (c.chunks_per_group > 0 &&
        c.chunks_per_group <= int64_t(blockIdx.x)) {  // then chunks_per_group < 2^31
      grp = int64_t(unsigned(blockIdx.x) / unsigned(c.chunks_per_group));
      kin = k - grp * c.chunks_per_group;
    }
  }
  __device__ void next(const Cfg& c) {
    k += gridDim.x;
    grp += c.grid_step_groups;
    kin += c.grid_step_chunks;
    if (kin >= c.chunks_per_group) kin -= c.chunks_per_group, ++grp;
  }
};

// Group and rows [r0, r1) of the walk's chunk.
__device__ __forceinline__ void chunk_rows(const Cfg& c, const ChunkWalk& w, int64_t& grp,
                                           int64_t& r0, int64_t& r1) {
  grp = w.grp;
  r0 = grp * c.group_rows + w.kin * c.chunk_rows;
  const int64_t end = (grp + 1) * c.group_rows;
  r1 = r0 + c.chunk_rows < end ? r0 + c.chunk_rows : end;
}

}  // namespace
}  // namespace adaln_cuda
}  // namespace adaptiveload
