// cuda_emu: runs CUDA C++ kernels on the CPU, to test their logic (not their speed) in CI
// on machines without a GPU. Host C++17 only; no CUDA toolkit needed.
//
// Model: a launch runs its blocks on a few OS threads; every CUDA thread of a block is a
// fiber on its block's OS thread (an x86-64 context switch, ucontext elsewhere).
// `__syncthreads` and every warp operation (shuffles, votes, __syncwarp) are yield points:
// a warp operation waits until every lane named in its mask has reached it (a warp barrier
// per shuffle), a block barrier until every thread of the block has. Between yield points
// the fibers of a block run in a selectable order (forward, reverse, random, lagged), so
// missing barriers and shared-memory races show up as wrong results.
//
// Checked, each reported as a failed launch with a message naming the site:
//   - barrier divergence: a thread exits, or reaches another __syncthreads, while others
//     wait at one; deadlocks (a warp operation waiting for lanes stuck at a block barrier);
//   - warp operations: mask naming absent or exited lanes, the caller not in its mask,
//     lanes of one mask at different operations, a shuffle reading a lane outside the mask,
//     a width that is not a power of two <= 32;
//   - launch limits: block > 1024 threads (or per-dimension limits), grid dimensions, a
//     block larger than the kernel's __launch_bounds__, shared memory beyond the limits
//     (48 KiB static; dynamic above 48 KiB only after cudaFuncSetAttribute, up to the
//     emulated device's opt-in maximum).
// Shared memory and device allocations are exact-size heap blocks (ASan sees overruns);
// shared memory starts filled with 0xff bytes (NaN as floats), so reads of unwritten
// shared memory show up.
//
// Source compatibility: `.cu` files are compiled unchanged as C++ after emu_rewrite.py
// rewrites `<<<...>>>` launches and `__shared__` declarations (keeping line numbers);
// include/ holds stand-ins for cuda_runtime.h, cuda_bf16.h and cuda_fp16.h.
//
// Environment: CUDA_EMU_ORDER = forward | reverse | random[:seed] | lagged[:seed]
// (default forward), CUDA_EMU_THREADS = OS threads per launch (default 2),
// CUDA_EMU_SMS = emulated SM count (default 132).
#pragma once

#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------- keywords

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __constant__ static
#define __CUDA_EMU__ 1

// ---------------------------------------------------------------- vector types

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned int x, y;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
};

namespace cuda_emu {

enum class Order { Forward, Reverse, Random, Lagged };

// Selects the order in which the threads of a block run between yield points (overrides
// CUDA_EMU_ORDER). Affects launches started afterwards.
void set_order(Order o, uint64_t seed = 1);
Order order();
// OS threads a launch spreads its blocks over (>= 1).
void set_threads(int n);
// SM count of the emulated device (>= 1; overrides CUDA_EMU_SMS): what
// cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount) and cudaGetDeviceProperties report.
// Lets a test shrink the device so that work sized from it (grids, chunks) changes shape.
void set_sms(int n);
// The message of the last failed launch (empty when none since the last call), cleared.
const char* take_failure();
// Launches completed and fibers switched, since the start (for the tests' statistics).
uint64_t launches();
uint64_t switches();

namespace detail {

struct ThreadCtx {
  uint3 tid;
};
struct BlockCtx {
  uint3 bidx;
  dim3 bdim, gdim;
};
// GNU __thread, not thread_local: no TLS wrapper function (whose UBSan null check GCC 12
// miscompiles, reporting a null pointer where there is none).
extern __thread ThreadCtx* tl_thread;
extern __thread BlockCtx* tl_block;

// ---- yield points (implemented in cuda_emu.cpp)
enum class BarKind { Sync, Count, And, Or };
int block_barrier(BarKind kind, int pred, const char* file, int line);
enum class WarpKind {
  ShflIdx,
  ShflUp,
  ShflDown,
  ShflXor,
  Ballot,
  Any,
  All,
  Sync,
  ReduceAdd,
  ReduceMin,
  ReduceMax
};
// `value` is the caller's operand (raw bits); returns the result's raw bits.
uint64_t warp_op(WarpKind kind, unsigned mask, uint64_t value, int param, int width,
                 const char* file, int line);
unsigned active_mask();
void* dynamic_shared();
void* static_shared(const char* key, size_t bytes, size_t align);
void thread_fence();

template <typename T>
uint64_t to_bits(const T& v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp operand of at most 8 bytes");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <typename T>
T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}

// ---- launches
struct LaunchCfg {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  LaunchCfg(dim3 g = dim3(), dim3 b = dim3(), size_t s = 0, cudaStream_t st = nullptr)
      : grid(g), block(b), smem(s), stream(st) {}
};
using Body = void (*)(void* closure);
// Runs body(closure) as every thread of every block; reports errors as cudaGetLastError
// does. max_threads: the kernel's __launch_bounds__ (0 = none).
void run_launch(const LaunchCfg& cfg, const void* kernel, const char* name, int max_threads,
                Body body, void* closure, const char* file, int line);

template <typename... P>
struct Launcher {
  LaunchCfg cfg;
  void (*kernel)(P...);
  const char* name;
  int max_threads;
  const char* file;
  int line;
  template <typename... A>
  void operator()(A&&... args) const {
    using Tuple = std::tuple<std::decay_t<P>...>;
    struct Closure {
      void (*k)(P...);
      Tuple args;
    } c{kernel, Tuple(std::forward<A>(args)...)};
    // Each thread gets its own copy of the by-value parameters, as on the device.
    run_launch(
        cfg, reinterpret_cast<const void*>(kernel), name, max_threads,
        [](void* p) {
          Closure* cl = static_cast<Closure*>(p);
          Tuple copy = cl->args;
          std::apply(cl->k, copy);
        },
        &c, file, line);
  }
};
template <typename... P>
Launcher<P...> launch(const LaunchCfg& cfg, void (*kernel)(P...), const char* name, int max_threads,
                      const char* file, int line) {
  return Launcher<P...>{cfg, kernel, name, max_threads, file, line};
}

template <typename T, size_t A = alignof(T)>
T& block_shared(const char* key) {
  return *static_cast<T*>(static_shared(key, sizeof(T), A));
}
template <typename T>
T* dynamic_shared_as() {
  return static_cast<T*>(dynamic_shared());
}

}  // namespace detail
}  // namespace cuda_emu

// ---------------------------------------------------------------- built-in variables

#define threadIdx (::cuda_emu::detail::tl_thread->tid)
#define blockIdx (::cuda_emu::detail::tl_block->bidx)
#define blockDim (::cuda_emu::detail::tl_block->bdim)
#define gridDim (::cuda_emu::detail::tl_block->gdim)
constexpr int warpSize = 32;

// ---------------------------------------------------------------- synchronisation

#define __syncthreads()                                                                    \
  ((void)::cuda_emu::detail::block_barrier(::cuda_emu::detail::BarKind::Sync, 0, __FILE__, \
                                           __LINE__))
#define __syncthreads_count(p)                                                                 \
  ::cuda_emu::detail::block_barrier(::cuda_emu::detail::BarKind::Count, (p) ? 1 : 0, __FILE__, \
                                    __LINE__)
#define __syncthreads_and(p)                                                                 \
  ::cuda_emu::detail::block_barrier(::cuda_emu::detail::BarKind::And, (p) ? 1 : 0, __FILE__, \
                                    __LINE__)
#define __syncthreads_or(p)                                                                 \
  ::cuda_emu::detail::block_barrier(::cuda_emu::detail::BarKind::Or, (p) ? 1 : 0, __FILE__, \
                                    __LINE__)
#define __threadfence() ::cuda_emu::detail::thread_fence()
#define __threadfence_block() ::cuda_emu::detail::thread_fence()

namespace cuda_emu {
namespace detail {
// Call-site wrappers: the macros below pass __FILE__ / __LINE__, which identify the
// operation for the "lanes at different operations" check.
struct Site {
  const char* file;
  int line;
  template <typename T>
  T op(WarpKind k, unsigned mask, T v, int param, int width) const {
    return from_bits<T>(warp_op(k, mask, to_bits(v), param, width, file, line));
  }
  template <typename T>
  T shfl(unsigned mask, T v, int src, int width = 32) const {
    return op(WarpKind::ShflIdx, mask, v, src, width);
  }
  template <typename T>
  T shfl_up(unsigned mask, T v, unsigned d, int width = 32) const {
    return op(WarpKind::ShflUp, mask, v, int(d), width);
  }
  template <typename T>
  T shfl_down(unsigned mask, T v, unsigned d, int width = 32) const {
    return op(WarpKind::ShflDown, mask, v, int(d), width);
  }
  template <typename T>
  T shfl_xor(unsigned mask, T v, int m, int width = 32) const {
    return op(WarpKind::ShflXor, mask, v, m, width);
  }
  unsigned ballot(unsigned mask, int p) const {
    return unsigned(warp_op(WarpKind::Ballot, mask, p != 0, 0, 32, file, line));
  }
  int any(unsigned mask, int p) const {
    return int(warp_op(WarpKind::Any, mask, p != 0, 0, 32, file, line));
  }
  int all(unsigned mask, int p) const {
    return int(warp_op(WarpKind::All, mask, p != 0, 0, 32, file, line));
  }
  void syncwarp(unsigned mask = 0xffffffffu) const {
    warp_op(WarpKind::Sync, mask, 0, 0, 32, file, line);
  }
  template <typename T>
  T reduce(WarpKind k, unsigned mask, T v) const {
    static_assert(std::is_integral<T>::value && sizeof(T) == 4,
                  "__reduce_*_sync takes 32-bit integers");
    const bool sgn = std::is_signed<T>::value;
    const uint64_t sv = sgn ? uint64_t(int64_t(v)) : uint64_t(v);
    return T(warp_op(k, mask, sv, sgn ? 1 : 0, 32, file, line));
  }
};
}  // namespace detail
}  // namespace cuda_emu

#define AL_EMU_SITE (::cuda_emu::detail::Site{__FILE__, __LINE__})
#define __shfl_sync(...) AL_EMU_SITE.shfl(__VA_ARGS__)
#define __shfl_up_sync(...) AL_EMU_SITE.shfl_up(__VA_ARGS__)
#define __shfl_down_sync(...) AL_EMU_SITE.shfl_down(__VA_ARGS__)
#define __shfl_xor_sync(...) AL_EMU_SITE.shfl_xor(__VA_ARGS__)
#define __ballot_sync(mask, p) AL_EMU_SITE.ballot((mask), (p) ? 1 : 0)
#define __any_sync(mask, p) AL_EMU_SITE.any((mask), (p) ? 1 : 0)
#define __all_sync(mask, p) AL_EMU_SITE.all((mask), (p) ? 1 : 0)
#define __syncwarp(...) AL_EMU_SITE.syncwarp(__VA_ARGS__)
#define __reduce_add_sync(mask, v) \
  AL_EMU_SITE.reduce(::cuda_emu::detail::WarpKind::ReduceAdd, (mask), (v))
#define __reduce_min_sync(mask, v) \
  AL_EMU_SITE.reduce(::cuda_emu::detail::WarpKind::ReduceMin, (mask), (v))
#define __reduce_max_sync(mask, v) \
  AL_EMU_SITE.reduce(::cuda_emu::detail::WarpKind::ReduceMax, (mask), (v))
#define __activemask() ::cuda_emu::detail::active_mask()

// ---------------------------------------------------------------- atomics (device scope)

template <typename T>
inline T atomicAdd(T* p, T v) {
  if constexpr (std::is_floating_point<T>::value) {
    T old, desired;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do {
      desired = old + v;
    } while (
        !__atomic_compare_exchange(p, &old, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return old;
  } else {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
  }
}
template <typename T>
inline T atomicSub(T* p, T v) {
  return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);
}
template <typename T>
inline T atomicExch(T* p, T v) {
  return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
template <typename T>
inline T atomicCAS(T* p, T cmp, T v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
template <typename T>
inline T atomicMax(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v &&
         !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}
template <typename T>
inline T atomicMin(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old > v &&
         !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}
inline unsigned atomicInc(unsigned* p, unsigned limit) {
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0u : old + 1u, false,
                                      __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}

// ---------------------------------------------------------------- memory and math

template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
template <typename T>
inline T __ldcs(const T* p) {
  return *p;
}
template <typename T>
inline T __ldcg(const T* p) {
  return *p;
}
template <typename T>
inline void __stcs(T* p, const T& v) {
  *p = v;
}
template <typename T>
inline void __stwt(T* p, const T& v) {
  *p = v;
}
template <typename T>
inline void __stcg(T* p, const T& v) {
  *p = v;
}
inline float rsqrtf(float v) { return 1.f / std::sqrt(v); }
inline float __frsqrt_rn(float v) { return 1.f / std::sqrt(v); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float v) { return std::exp(v); }
inline float __logf(float v) { return std::log(v); }
inline float __frcp_rn(float v) { return 1.f / v; }
inline float __saturatef(float v) { return v < 0.f ? 0.f : (v > 1.f ? 1.f : v); }
inline int __float_as_int(float v) {
  return cuda_emu::detail::from_bits<int>(cuda_emu::detail::to_bits(v));
}
inline float __int_as_float(int v) {
  return cuda_emu::detail::from_bits<float>(cuda_emu::detail::to_bits(v));
}
inline unsigned __float_as_uint(float v) {
  return cuda_emu::detail::from_bits<unsigned>(cuda_emu::detail::to_bits(v));
}
inline float __uint_as_float(unsigned v) {
  return cuda_emu::detail::from_bits<float>(cuda_emu::detail::to_bits(v));
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(unsigned(v)); }
