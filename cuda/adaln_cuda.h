// CUDA entry points of the fused adaLN op. Plain C++: no CUDA types, so the torch binding
// and the tests include it without nvcc. See src/adaptiveload/kernels/adaln.h for the
// math and the AdalnParams fields; docs/kernels.md for the kernel design.
//
// Every pointer in AdalnParams is a device pointer here (mean and rstd too). `stream` is a
// cudaStream_t (nullptr = the legacy default stream). The calls are asynchronous on that
// stream; they throw std::invalid_argument for bad params (validate() plus the limits
// below) and std::runtime_error when a launch fails.
//
// Limits of the CUDA path: mod_dtype is F32 or equal to x_dtype (weight_dtype may be any);
// dim <= adaln_cuda_max_dim() (2^31 - 9: 32-bit columns; rows wider than 8192 take looped
// kernels). Any int64 row count (grid-stride loops), any strides >= dim and any element-
// aligned pointers (128-bit accesses for the 16-byte aligned bulk of the rows when the
// operands agree on where it starts, element accesses for the rest).
//
// Backward workspace: call adaln_bwd_cuda_workspace_bytes(p) with the params filled in
// (sizes, per_token and which of dscale / dshift / dweight / dbias are wanted: the
// pointers only need to be non-null at this point), allocate that many bytes of device
// memory (any cudaMalloc / caching-allocator block; 16-byte alignment suffices) and set
// p.workspace and p.workspace_bytes before calling adaln_bwd_cuda, with the same device
// current. The size depends only on (rows, dim, batch, rows_per_sample, per_token, dtypes,
// whether weight / bias are given (they select the kernel), requested outputs) and on the
// current device (its SM count and how many blocks of that kernel it holds at once: the
// rows are cut into about one chunk per resident block); it is 0 when no reduction over
// rows is requested (per-token without dweight / dbias). It holds fp32 partial sums: two partial
// rows per chunk of rows, plus two [batch, dim] rows for per-sample dweight / dbias; it
// needs no initialisation and may be reused once the call's work on the stream is done.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {

// Forward: writes y, mean, rstd.
void adaln_fwd_cuda(const AdalnParams& p, void* stream);

// Device scratch bytes adaln_bwd_cuda needs for these params.
size_t adaln_bwd_cuda_workspace_bytes(const AdalnParams& p);

// Backward: writes dx and the requested dscale / dshift / dweight / dbias. Deterministic:
// the row partition depends only on the shape and the device model (SM count, occupancy),
// so results are bit-identical run to run and across GPUs of one model with the same
// binary (another SM count cuts other chunks; the SASS of another architecture may
// contract or order the arithmetic differently).
void adaln_bwd_cuda(const AdalnParams& p, void* stream);

// Largest dim the CUDA kernels accept.
int64_t adaln_cuda_max_dim();

}  // namespace adaptiveload
