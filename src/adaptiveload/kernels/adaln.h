// Fused LayerNorm-Modulate (adaLN): params struct and CPU entry points.
//
//   forward:  mean, rstd = stats(x row); xhat = (x - mean) * rstd
//             n = xhat * w + b          (w = 1, b = 0 when weight / bias are absent)
//             y = n * (1 + scale) + shift
//   backward: dshift = sum dy, dscale = sum dy * n            (over the rows of a sample or
//             dn = dy * (1 + scale), dxhat = dn * w            segment, or per row when per_token)
//             dbias = sum dn, dweight = sum dn * xhat         (over all rows)
//             dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
//
// x is [N, D] rows: N = B * L (B samples of L rows), or n segments of any lengths given by
// cu_seqlens (a packed batch: segment i is rows cu_seqlens[i] .. cu_seqlens[i + 1] - 1 and
// uses modulation row i), or per-token modulation (one row each). All arithmetic is fp32 (the
// reference: fp64); storage is fp32, bf16 or fp16 (or fp64, the reference's only, with fp64
// statistics). The struct is plain data, in the style of flash-attention's Flash_fwd_params: a
// binding fills it from tensors and calls adaln_*_{ref,cpu,cuda}. No torch or CUDA types here. See
// docs/kernels.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace adaptiveload {

// F64 is accepted by the reference only (adaln_*_ref): fp64 storage end to end, so that the
// op can be checked with finite differences in float64 (torch.autograd.gradcheck). The fast
// paths (CPU SIMD, CUDA) reject it in validate().
enum class DType : int32_t { F32 = 0, BF16 = 1, F16 = 2, F64 = 3 };

// Bytes per element, and "f32" / "bf16" / "f16" / "f64".
size_t dtype_size(DType t);
const char* dtype_name(DType t);

// The dtype of the saved per-row mean / rstd for x of dtype x_dtype: F64 for F64 x (so that
// the fp64 reference's backward is fp64 accurate: gradcheck), F32 for F32 / BF16 / F16 x.
DType adaln_stats_dtype(DType x_dtype);

struct AdalnParams {
  // --- sizes -------------------------------------------------------------------------
  int64_t rows = 0;             // N = batch * rows_per_sample, or cu_seqlens[batch]
  int64_t dim = 0;              // D, the normalised (last) dimension
  int64_t batch = 0;            // B samples or n segments: the rows of [B, D] modulation
  int64_t rows_per_sample = 0;  // L; row r belongs to sample r / L (0 with cu_seqlens)
  bool per_token = false;       // modulation is [N, D] (true) or [B, D] (false)
  float eps = 1e-6f;
  // Segments of any lengths (packed samples), instead of B samples of L rows: [batch + 1]
  // ascending offsets from 0 to rows, int32 or int64 (cu_seqlens_i64), in the memory the
  // entry point reads (host for the CPU paths, device for CUDA); segment i (possibly empty)
  // is rows cu_seqlens[i] .. cu_seqlens[i + 1] - 1 and uses modulation row i. nullptr: none.
  const void* cu_seqlens = nullptr;
  bool cu_seqlens_i64 = false;

  // --- dtypes ------------------------------------------------------------------------
  DType x_dtype = DType::F32;       // x, y, dy, dx
  DType mod_dtype = DType::F32;     // scale, shift, dscale, dshift
  DType weight_dtype = DType::F32;  // weight, bias, dweight, dbias

  // --- inputs (row strides in elements; a stride must be >= dim) ---------------------
  const void* x = nullptr;  // [N, D]
  int64_t x_stride = 0;
  const void* scale = nullptr;  // [B, D] or [N, D]
  int64_t scale_stride = 0;
  const void* shift = nullptr;  // [B, D] or [N, D]
  int64_t shift_stride = 0;
  const void* weight = nullptr;  // [D] contiguous, or nullptr = absent (w = 1)
  const void* bias = nullptr;    // [D] contiguous, or nullptr = absent (b = 0)

  // --- forward outputs ---------------------------------------------------------------
  void* y = nullptr;  // [N, D], x_dtype
  int64_t y_stride = 0;
  // Saved statistics [N], in adaln_stats_dtype(x_dtype); only that pair is read or written:
  float* mean = nullptr;       // fp32, for F32 / BF16 / F16 x
  float* rstd = nullptr;       // fp32, 1 / sqrt(var + eps), biased variance
  double* mean_f64 = nullptr;  // fp64, for F64 x (the reference only)
  double* rstd_f64 = nullptr;  // fp64, 1 / sqrt(var + eps)

  // --- backward: inputs dy, the statistics (as saved by the forward), x, scale, weight, bias
  const void* dy = nullptr;  // [N, D], x_dtype
  int64_t dy_stride = 0;
  void* dx = nullptr;  // [N, D], x_dtype (required)
  int64_t dx_stride = 0;
  void* dscale = nullptr;  // like scale (mod_dtype), or nullptr = not wanted
  int64_t dscale_stride = 0;
  void* dshift = nullptr;  // like shift (mod_dtype), or nullptr = not wanted
  int64_t dshift_stride = 0;
  void* dweight = nullptr;  // [D] weight_dtype, needs weight; nullptr = not wanted
  void* dbias = nullptr;    // [D] weight_dtype, needs bias; nullptr = not wanted

  // --- CUDA backward only: device scratch of adaln_bwd_cuda_workspace_bytes(*this) ---
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Sets every row stride to dim (dense row-major tensors).
void adaln_set_contiguous_strides(AdalnParams& p);

enum class AdalnPass { Fwd, Bwd };

// Throws std::invalid_argument naming the bad field ("AdalnParams.x_stride (10) < dim (16)")
// when sizes, dtypes, strides or the pointers a pass needs (the statistics: the pair of
// adaln_stats_dtype(x_dtype)) are wrong. The one-argument form
// checks only what both passes share. Every adaln_* entry point validates first.
void validate(const AdalnParams& p);
void validate(const AdalnParams& p, AdalnPass pass);
// The same checks, accepting F64 storage too (the reference's).
void validate_reference(const AdalnParams& p, AdalnPass pass);
// The values of p.cu_seqlens, which must be readable here (host memory): cu_seqlens[0] = 0,
// ascending, cu_seqlens[batch] = rows; throws std::invalid_argument naming the first bad
// entry. validate() cannot read them (a CUDA caller's pointer is a device pointer); the CPU
// entry points call this too, the CUDA ones leave it to the caller (the torch binding).
void validate_segments(const AdalnParams& p);

// Offset i (0 <= i <= batch) of p.cu_seqlens (host memory).
inline int64_t adaln_cu_seqlen(const AdalnParams& p, int64_t i) {
  return p.cu_seqlens_i64 ? static_cast<const int64_t*>(p.cu_seqlens)[i]
                          : int64_t(static_cast<const int32_t*>(p.cu_seqlens)[i]);
}
// The segment holding row r (0 <= r < rows) of valid host cu_seqlens: the last i with
// cu_seqlens[i] <= r (empty segments hold no row). Binary search.
int64_t adaln_segment_of(const AdalnParams& p, int64_t r);

// CPU reference (simple loops, fp64 accumulation): the ground truth. The only entry points
// that take F64 storage; for F64 x they save and read fp64 mean_f64 / rstd_f64.
void adaln_fwd_ref(const AdalnParams& p);
void adaln_bwd_ref(const AdalnParams& p);

// Optimised CPU path: OpenMP over rows, SIMD over D on the path chosen at run time
// (AVX-512 / AVX2 / scalar, see simd_dispatch_cpu.h). Deterministic: the reductions use a
// fixed row partition, so dscale / dshift / dweight / dbias are bit-identical for any
// thread count.
void adaln_fwd_cpu(const AdalnParams& p);
void adaln_bwd_cpu(const AdalnParams& p);

// Empty inputs: N == 0 writes nothing except the reductions, which are sums over no rows
// and are set to zero (dscale / dshift [B, D] when per-sample or segmented, dweight / dbias
// [D]); so are the dscale / dshift rows of an empty segment.

}  // namespace adaptiveload
