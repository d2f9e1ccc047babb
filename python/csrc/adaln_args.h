// The torch side of the fused adaLN op: checks tensors (shapes, devices, dtypes) with
// messages that name the argument and its shape, and fills the plain AdalnParams struct the
// kernels take. The only place, with the op files beside it, that touches at::Tensor.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {
namespace py {

// How x and the modulation line up. x is [B, L, D] or [N, D]; shift and scale have one
// shape, [B, D] or [B, 1, D] (per sample) or [B, L, D] (per token) for 3-D x, [1, D] (one
// sample of N rows) or [N, D] (per row) for 2-D x; with cu_seqlens [n + 1] (segments of a
// packed x [N, D]) [n, D].
struct AdalnLayout {
  int64_t rows = 0;             // N = B * L
  int64_t dim = 0;              // D
  int64_t batch = 0;            // B, or n segments
  int64_t rows_per_sample = 0;  // L (0 with segments)
  bool per_token = false;
  bool segments = false;  // cu_seqlens given
  bool cu_seqlens_i64 = false;
  DType x_dtype = DType::F32, mod_dtype = DType::F32, weight_dtype = DType::F32;
};

// Checks the forward's inputs (cu_seqlens: its dtype, device and length, not its values);
// throws c10::ValueError (Python ValueError) for shapes and dtypes, c10::Error
// (RuntimeError) for devices. Works on meta tensors.
AdalnLayout adaln_check_inputs(const at::Tensor& x, const at::Tensor& shift,
                               const at::Tensor& scale, const c10::optional<at::Tensor>& weight,
                               const c10::optional<at::Tensor>& bias, double eps,
                               const c10::optional<at::Tensor>& cu_seqlens);

// Checks the values of cu_seqlens: cu_seqlens[0] = 0, ascending, cu_seqlens[n] = N (rows of
// x); c10::ValueError naming the first bad entry. Reads them: one small copy to the host
// for a CUDA tensor (a synchronisation). Not for meta / fake tensors.
void adaln_check_cu_seqlens_values(const AdalnLayout& lay, const at::Tensor& cu_seqlens);

// Checks the backward's extra inputs (dy like x; mean, rstd of x.shape[:-1] in
// adaln_stats_scalar_type: float64 for float64 x, else float32).
void adaln_check_bwd_inputs(const AdalnLayout& lay, const at::Tensor& dy, const at::Tensor& x,
                            const at::Tensor& mean, const at::Tensor& rstd);

// The saved mean / rstd's dtype for x of `lay` (adaln_stats_dtype: kDouble for float64 x).
inline at::ScalarType adaln_stats_scalar_type(const AdalnLayout& lay) {
  return adaln_stats_dtype(lay.x_dtype) == DType::F64 ? at::kDouble : at::kFloat;
}

// Points p's statistics (the pair of p.x_dtype's stats dtype) at mean / rstd, which have
// adaln_stats_scalar_type (the forward's outputs, or checked by adaln_check_bwd_inputs).
void set_stats_ptrs(AdalnParams& p, const at::Tensor& mean, const at::Tensor& rstd);

// Sizes, dtypes and eps of `lay` in a params struct with contiguous strides; pointers null
// (cu_seqlens too: the kernel files point it at their contiguous copy).
AdalnParams adaln_params(const AdalnLayout& lay, double eps);

// at::Tensor -> pointer, or nullptr for an absent optional tensor.
inline const void* ptr_or_null(const c10::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? t->data_ptr() : nullptr;
}

// A defined optional tensor made contiguous, or an absent one.
c10::optional<at::Tensor> contiguous_or_none(const c10::optional<at::Tensor>& t);

// True when any operand is float64: the CPU op then runs the fp64 reference, and the CUDA op
// refuses (its kernels store fp32 / bf16 / fp16).
inline bool adaln_uses_f64(const AdalnLayout& lay) {
  return lay.x_dtype == DType::F64 || lay.mod_dtype == DType::F64 || lay.weight_dtype == DType::F64;
}

// Runs a kernel entry point, turning its std::invalid_argument into a Python ValueError.
template <class F>
void run_kernel(const char* what, F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, what, ": ", e.what());
  }
}

}  // namespace py
}  // namespace adaptiveload
