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

// adaln_fwd(x, shift, scale, weight?, bias?, eps, cu_seqlens?) -> (y, mean, rstd)
//   y like x; mean and rstd of shape x.shape[:-1] (saved for the backward), float64 for
//   float64 x, float32 otherwise (adaln_stats_dtype). cu_seqlens [n + 1]: x [N, D] is n
//   segments, scale / shift [n, D].
using AdalnFwdSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, double, const c10::optional<at::Tensor>&);
// adaln_bwd(dy, x, scale, weight?, bias?, mean, rstd, output_mask[shift, scale, weight, bias],
//   cu_seqlens?) -> (dx, dshift, dscale, dweight, dbias); a gradient not asked for (or for an
//   absent weight / bias) is an empty [0] tensor.
using AdalnBwdSig = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
    const c10::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&, std::array<bool, 4>,
    const c10::optional<at::Tensor>&);

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_adaln_fwd(
    const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias, double eps,
    const c10::optional<at::Tensor>& cu_seqlens);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> call_adaln_bwd(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
    const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 4> mask,
    const c10::optional<at::Tensor>& cu_seqlens);

// The backward in differentiable ATen ops (adaln_composite.cpp): the same outputs as
// adaln_bwd, each a function of every input (dy, x, scale, weight, bias, mean, rstd) that
// autograd can differentiate again. adaln_bwd's Autograd kernel takes it when grad mode is on
// and an input requires grad (double backward, gradient penalties); fp32 math (fp64 for
// float64 x), not fused.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> adaln_bwd_composite(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
    const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 4> mask,
    const c10::optional<at::Tensor>& cu_seqlens);
// x's per-row mean and rstd = 1 / sqrt(var + eps) in differentiable ATen ops (fp32, fp64 for
// float64 x): the statistics as functions of x, which the saved ones are not.
std::tuple<at::Tensor, at::Tensor> adaln_stats_composite(const at::Tensor& x, double eps);

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
