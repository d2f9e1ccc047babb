// The fused adaLN op's schema (TORCH_LIBRARY, in adaln_ops.cpp) and typed dispatcher
// handles, so the autograd kernel calls the ops through the dispatcher (device kernels
// below it).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include <array>
#include <tuple>

#include "adaptiveload/kernels/adaln.h"

namespace adaptiveload {
namespace py {

// adaln_fwd(x, shift, scale, weight?, bias?, eps) -> (y, mean, rstd)
//   y like x; mean and rstd of shape x.shape[:-1] (saved for the backward), float64 for
//   float64 x, float32 otherwise (adaln_stats_dtype).
using AdalnFwdSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, double);
// adaln_bwd(dy, x, scale, weight?, bias?, mean, rstd, output_mask[shift, scale, weight, bias])
//   -> (dx, dshift, dscale, dweight, dbias); a gradient not asked for (or for an absent
//   weight / bias) is an empty [0] tensor.
using AdalnBwdSig = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&, std::array<bool, 4>);

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_adaln_fwd(
    const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> call_adaln_bwd(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
    const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 4> mask);

// Output tensors of the op for these inputs (shared by the CPU, CUDA and Meta kernels).
struct AdalnFwdOut {
  at::Tensor y, mean, rstd;
};
AdalnFwdOut adaln_fwd_outputs(const at::Tensor& x, at::ScalarType stats_dtype);
struct AdalnBwdOut {
  at::Tensor dx, dshift, dscale, dweight, dbias;
  std::array<bool, 4> mask{};  // which of dshift, dscale, dweight, dbias are computed
};
AdalnBwdOut adaln_bwd_outputs(const at::Tensor& x, const at::Tensor& scale,
                              const c10::optional<at::Tensor>& weight,
                              const c10::optional<at::Tensor>& bias, std::array<bool, 4> mask);

// Points the params' gradient outputs at `o`'s tensors, nullptr for those not computed.
void set_bwd_output_ptrs(AdalnParams& p, const AdalnBwdOut& o);

}  // namespace py
}  // namespace adaptiveload
