// Host-side helpers for the CUDA adaLN test and benchmark: mirror a host AdalnParams
// (as built by adaln_check::AdalnProblem) to device memory, run a CUDA entry point, copy
// the outputs back. Lets the CUDA kernels be checked by the same adaln_check rule as the
// CPU path. Only for tests and benchmarks (synchronous, allocates per call).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "adaln_cuda.h"
#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {
namespace cuda_testing {

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// True when a CUDA device is usable; `why` says why not.
inline bool have_device(std::string* why = nullptr) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA devices";
    cudaGetLastError();  // clear the sticky error of the failed query
    return false;
  }
  return true;
}

// Elements spanned by `rows` rows of `dim` with row stride `stride`.
inline size_t span(int64_t rows, int64_t stride, int64_t dim) {
  return rows <= 0 || dim <= 0 ? 0 : size_t((rows - 1) * stride + dim);
}

class DeviceMirror {
 public:
  AdalnParams dp;  // the same params, device pointers

  // shift: every tensor starts that many of its own elements past a 256-byte aligned
  // allocation (misaligned operands that still agree on the column where their rows reach
  // 16 bytes, when the row strides are multiples of 16 bytes); 0 = aligned. x_shift >= 0:
  // x alone starts that many elements past one instead (operands that disagree).
  explicit DeviceMirror(const AdalnParams& hp, bool bwd, int shift = 0, int x_shift = -1)
      : dp(hp), shift_(shift) {
    const size_t es = dtype_size(hp.x_dtype), em = dtype_size(hp.mod_dtype),
                 ew = dtype_size(hp.weight_dtype);
    const int64_t mod_rows = hp.per_token ? hp.rows : hp.batch;
    const int64_t N = hp.rows, D = hp.dim;
    shift_ = x_shift >= 0 ? x_shift : shift;
    dp.x = mirror(hp.x, span(N, hp.x_stride, D), es, false);
    shift_ = shift;
    dp.scale = mirror(hp.scale, span(mod_rows, hp.scale_stride, D), em, false);
    dp.shift = mirror(hp.shift, span(mod_rows, hp.shift_stride, D), em, false);
    dp.weight = mirror(hp.weight, size_t(D), ew, false);
    dp.bias = mirror(hp.bias, size_t(D), ew, false);
    shift_ = 0;  // offsets stay aligned
    dp.cu_seqlens = mirror(hp.cu_seqlens, size_t(hp.batch + 1), hp.cu_seqlens_i64 ? 8 : 4, false);
    shift_ = shift;
    dp.mean = static_cast<float*>(mirror(hp.mean, size_t(N), 4, !bwd));
    dp.rstd = static_cast<float*>(mirror(hp.rstd, size_t(N), 4, !bwd));
    if (!bwd) {
      dp.y = mirror(hp.y, span(N, hp.y_stride, D), es, true);
      dp.dy = dp.dx = dp.dscale = dp.dshift = dp.dweight = dp.dbias = nullptr;
    } else {
      dp.y = nullptr;
      dp.dy = mirror(hp.dy, span(N, hp.dy_stride, D), es, false);
      dp.dx = mirror(hp.dx, span(N, hp.dx_stride, D), es, true);
      dp.dscale = mirror(hp.dscale, span(mod_rows, hp.dscale_stride, D), em, true);
      dp.dshift = mirror(hp.dshift, span(mod_rows, hp.dshift_stride, D), em, true);
      dp.dweight = mirror(hp.dweight, size_t(D), ew, true);
      dp.dbias = mirror(hp.dbias, size_t(D), ew, true);
      dp.workspace_bytes = adaln_bwd_cuda_workspace_bytes(dp);
      dp.workspace = dp.workspace_bytes ? alloc(dp.workspace_bytes) : nullptr;
    }
  }
  ~DeviceMirror() {
    for (void* d : owned_) cudaFree(d);
  }
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;

  void copy_back() {
    cuda_ok(cudaDeviceSynchronize(), "kernel");
    for (const Out& o : outs_)
      cuda_ok(cudaMemcpy(o.host, o.dev, o.bytes, cudaMemcpyDeviceToHost), "copy back");
  }

 private:
  struct Out {
    void* host;
    void* dev;
    size_t bytes;
  };
  int shift_ = 0;
  std::vector<void*> owned_;
  std::vector<Out> outs_;

  void* alloc(size_t bytes) {
    void* d = nullptr;
    cuda_ok(cudaMalloc(&d, bytes), "cudaMalloc");
    owned_.push_back(d);
    return d;
  }
  void* mirror(const void* host, size_t elems, size_t es, bool output) {
    const size_t bytes = elems * es;
    if (host == nullptr || bytes == 0) return host == nullptr ? nullptr : alloc(16);
    void* d = static_cast<char*>(alloc(bytes + size_t(shift_) * es)) + size_t(shift_) * es;
    cuda_ok(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), "copy in");  // keeps NaN sentinels
    if (output) outs_.push_back({const_cast<void*>(host), d, bytes});
    return d;
  }
};

inline void run_fwd_cuda(const AdalnParams& hp) {
  DeviceMirror m(hp, false);
  adaln_fwd_cuda(m.dp, nullptr);
  m.copy_back();
}

inline void run_bwd_cuda(const AdalnParams& hp) {
  DeviceMirror m(hp, true);
  adaln_bwd_cuda(m.dp, nullptr);
  m.copy_back();
}

// The same with every device tensor `shift` elements past an aligned address (x alone
// x_shift past one when x_shift >= 0).
inline void run_fwd_cuda_shifted(const AdalnParams& hp, int shift, int x_shift = -1) {
  DeviceMirror m(hp, false, shift, x_shift);
  adaln_fwd_cuda(m.dp, nullptr);
  m.copy_back();
}
inline void run_bwd_cuda_shifted(const AdalnParams& hp, int shift, int x_shift = -1) {
  DeviceMirror m(hp, true, shift, x_shift);
  adaln_bwd_cuda(m.dp, nullptr);
  m.copy_back();
}

}  // namespace cuda_testing
}  // namespace adaptiveload
