// CUDA entry points of the fused adaLN op. Plain C++: no CUDA types, so the torch binding
// and the tests include it without nvcc. See src/adaptiveload/kernels/adaln.h for the
// math and the AdalnParams fields; docs/kernels.md for the kernel design.
//
// Every pointer in AdalnParams is a device pointer here (mean and rstd too). `stream` is a
// cudaStream_t (nullptr = the legacy default stream). The calls are asynchronous on that
// stream; they throw std::invalid_argument for bad params (validate() plus the limits
// below) and std::runtime_error when a launch fails.
//
// Segments (p.cu_seqlens, a device pointer): the kernels read the offsets on the device and
// never check them (that would synchronise): the caller makes sure they ascend from 0 to rows
// (the torch binding checks them); with bad offsets the results are wrong, but no read or
// write leaves the tensors and every launch ends.
//
// Limits of the CUDA path: mod_dtype is F32 or equal to x_dtype (weight_dtype may be any);
// dim <= adaln_cuda_max_dim() (2^31 - 9: 32-bit columns; rows wider than 8192 take looped
// kernels). Any int64 row count (grid-stride loops), any strides >= dim and any element-
// aligned pointers (128-bit accesses for the 16-byte aligned bulk of the rows of every
// operand whose rows reach 16 bytes at the column most of them do, element accesses for
// the rest; see adaln_cuda_row_layout).
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
// rows per chunk of rows, plus, when the finalize cuts its rows into several segments, two
// [segments, dim] rows and one 32-bit counter per 32 columns (cleared by the backward kernel
// itself); it needs no initialisation and may be reused once the call's work on the stream
// is done.
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

// What adaln_bwd_cuda launches for these params on the current device (the same sizing
// as adaln_bwd_cuda_workspace_bytes); for tests and benchmarks.
struct AdalnCudaBwdPlan {
  int team = 0;                   // threads a row
  int vectors_per_thread = 0;     // 0: the looped kernels (D > 8192)
  int64_t chunks = 0;             // chunks of rows: two fp32 [D] partial rows each (with
                                  // segments, one pair a piece: chunks + segments - 1 at most)
  int64_t rows_per_chunk = 0;     // at most (the last chunk of a sample may be short)
  int64_t blocks = 0;             // backward kernel blocks
  int finalize_mode = -1;         // 0 sum over chunks, 1 per-sample, 2 split samples,
                                  // 3 segments (cu_seqlens); -1 none
  int64_t finalize_segments = 0;  // row segments of the finalize (blocks: x column tiles)
  int64_t finalize_blocks = 0;    // 0 when no finalize runs
  int64_t partial_bytes = 0;      // workspace traffic of the partial rows (written + read)
  int64_t samples_per_chunk = 0;  // > 0: per-sample, a team a whole sample (short samples)
};
AdalnCudaBwdPlan adaln_bwd_cuda_plan(const AdalnParams& p);

// How the kernels lay out the rows for these params (the device pointers and strides
// decide it; for tests and benchmarks). `vector_operands`: the row operands, as
// AdalnRowOperand bits, whose whole 8-element vectors move 128 bits at a time (the others
// element by element); 0: every element moves alone (no operand has a row stride of a
// multiple of 16 bytes reaching 16 bytes at one column, or the row is shorter than 8).
// `head`: the columns before the first whole vector; `vectors`: a row's vectors (the head
// and the tail share one when they are short), at most ceil(dim / 8).
enum AdalnRowOperand : unsigned {
  kAdalnOpX = 1u,
  kAdalnOpY = 2u,
  kAdalnOpDy = 4u,
  kAdalnOpDx = 8u,
  kAdalnOpScale = 16u,  // per-token modulation and its gradients
  kAdalnOpShift = 32u,
  kAdalnOpDscale = 64u,
  kAdalnOpDshift = 128u,
};
struct AdalnCudaRowLayout {
  unsigned vector_operands = 0;
  int64_t head = 0;
  int64_t vectors = 0;
};
AdalnCudaRowLayout adaln_cuda_row_layout(const AdalnParams& p, bool backward);

// Largest dim the CUDA kernels accept.
int64_t adaln_cuda_max_dim();

}  // namespace adaptiveload
