// The fused adaLN op: schema (TORCH_LIBRARY, once) and CPU kernels. The CUDA kernels are in
// adaln_ops_cuda.cpp, the autograd kernel in adaln_autograd.cpp; the fake (meta) kernel is
// registered from Python (adaptiveload/_fake.py, torch.library.register_fake), which works
// with symbolic shapes under torch.compile and serves meta tensors too.
//   torch.ops.adaptiveload.adaln_fwd(x, shift, scale, weight, bias, eps, cu_seqlens=None)
//       -> (y, mean, rstd)
//   torch.ops.adaptiveload.adaln_bwd(dy, x, scale, weight, bias, mean, rstd, output_mask,
//       cu_seqlens=None) -> (dx, dshift, dscale, dweight, dbias)
#include "adaln_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "adaln_args.h"

namespace adaptiveload {
namespace py {

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_adaln_fwd(
    const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias, double eps,
    const c10::optional<at::Tensor>& cu_seqlens) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("adaptiveload::adaln_fwd", "")
                       .typed<AdalnFwdSig>();
  return op.call(x, shift, scale, weight, bias, eps, cu_seqlens);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> call_adaln_bwd(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
    const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 4> mask,
    const c10::optional<at::Tensor>& cu_seqlens) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("adaptiveload::adaln_bwd", "")
                       .typed<AdalnBwdSig>();
  return op.call(dy, x, scale, weight, bias, mean, rstd, mask, cu_seqlens);
}

AdalnFwdOut adaln_fwd_outputs(const at::Tensor& x, at::ScalarType stats_dtype) {
  auto stats = x.sizes().vec();
  stats.pop_back();  // [B, L] or [N]
  const auto opts = x.options().dtype(stats_dtype);
  return {at::empty(x.sizes(), x.options()), at::empty(stats, opts), at::empty(stats, opts)};
}

AdalnBwdOut adaln_bwd_outputs(const at::Tensor& x, const at::Tensor& scale,
                              const c10::optional<at::Tensor>& weight,
                              const c10::optional<at::Tensor>& bias, std::array<bool, 4> mask) {
  // A gradient not asked for is an empty [0] tensor of x's dtype (the schema returns Tensor,
  // not Tensor?, and the fake kernel must say the same); the kernels get nullptr for it.
  const auto none = [&] { return at::empty({0}, x.options()); };
  AdalnBwdOut o;
  o.dx = at::empty(x.sizes(), x.options());
  o.dshift = mask[0] ? at::empty(scale.sizes(), scale.options()) : none();
  o.dscale = mask[1] ? at::empty(scale.sizes(), scale.options()) : none();
  o.dweight = mask[2] && weight.has_value() && weight->defined()
                  ? at::empty(weight->sizes(), weight->options())
                  : none();
  o.dbias = mask[3] && bias.has_value() && bias->defined()
                ? at::empty(bias->sizes(), bias->options())
                : none();
  o.mask = {mask[0], mask[1], mask[2] && weight.has_value() && weight->defined(),
            mask[3] && bias.has_value() && bias->defined()};
  return o;
}

void set_bwd_output_ptrs(AdalnParams& p, const AdalnBwdOut& o) {
  p.dshift = o.mask[0] ? o.dshift.data_ptr() : nullptr;
  p.dscale = o.mask[1] ? o.dscale.data_ptr() : nullptr;
  p.dweight = o.mask[2] ? o.dweight.data_ptr() : nullptr;
  p.dbias = o.mask[3] ? o.dbias.data_ptr() : nullptr;
}

namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> adaln_fwd_cpu_kernel(
    const at::Tensor& x_in, const at::Tensor& shift_in, const at::Tensor& scale_in,
    const c10::optional<at::Tensor>& weight_in, const c10::optional<at::Tensor>& bias_in,
    double eps, const c10::optional<at::Tensor>& cu_in) {
  const AdalnLayout lay =
      adaln_check_inputs(x_in, shift_in, scale_in, weight_in, bias_in, eps, cu_in);
  if (lay.segments) adaln_check_cu_seqlens_values(lay, *cu_in);
  // Non-contiguous inputs are copied, not rejected (no copy when already contiguous).
  const at::Tensor x = x_in.contiguous(), shift = shift_in.contiguous(),
                   scale = scale_in.contiguous();
  const auto weight = contiguous_or_none(weight_in), bias = contiguous_or_none(bias_in);
  const auto cu = contiguous_or_none(cu_in);
  AdalnFwdOut o = adaln_fwd_outputs(x, adaln_stats_scalar_type(lay));
  AdalnParams p = adaln_params(lay, eps);
  p.x = x.data_ptr(), p.shift = shift.data_ptr(), p.scale = scale.data_ptr();
  p.weight = ptr_or_null(weight), p.bias = ptr_or_null(bias), p.cu_seqlens = ptr_or_null(cu);
  p.y = o.y.data_ptr();
  set_stats_ptrs(p, o.mean, o.rstd);
  run_kernel("fused_adaln", [&] { adaln_uses_f64(lay) ? adaln_fwd_ref(p) : adaln_fwd_cpu(p); });
  return {o.y, o.mean, o.rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> adaln_bwd_cpu_kernel(
    const at::Tensor& dy_in, const at::Tensor& x_in, const at::Tensor& scale_in,
    const c10::optional<at::Tensor>& weight_in, const c10::optional<at::Tensor>& bias_in,
    const at::Tensor& mean_in, const at::Tensor& rstd_in, std::array<bool, 4> mask,
    const c10::optional<at::Tensor>& cu_in) {
  // The layout check takes scale as both modulation tensors: shift is not needed backward.
  const AdalnLayout lay =
      adaln_check_inputs(x_in, scale_in, scale_in, weight_in, bias_in, 0.0, cu_in);
  adaln_check_bwd_inputs(lay, dy_in, x_in, mean_in, rstd_in);
  if (lay.segments) adaln_check_cu_seqlens_values(lay, *cu_in);
  const at::Tensor dy = dy_in.contiguous(), x = x_in.contiguous(), scale = scale_in.contiguous();
  const at::Tensor mean = mean_in.contiguous(), rstd = rstd_in.contiguous();
  const auto weight = contiguous_or_none(weight_in), bias = contiguous_or_none(bias_in);
  const auto cu = contiguous_or_none(cu_in);
  AdalnBwdOut o = adaln_bwd_outputs(x, scale, weight, bias, mask);
  AdalnParams p = adaln_params(lay, 0.0);
  p.x = x.data_ptr(), p.scale = scale.data_ptr();
  p.weight = ptr_or_null(weight), p.bias = ptr_or_null(bias), p.cu_seqlens = ptr_or_null(cu);
  set_stats_ptrs(p, mean, rstd);
  p.dy = dy.data_ptr(), p.dx = o.dx.data_ptr();
  set_bwd_output_ptrs(p, o);
  run_kernel("fused_adaln backward",
             [&] { adaln_uses_f64(lay) ? adaln_bwd_ref(p) : adaln_bwd_cpu(p); });
  return {o.dx, o.dshift, o.dscale, o.dweight, o.dbias};
}

}  // namespace
}  // namespace py
}  // namespace adaptiveload

TORCH_LIBRARY(adaptiveload, m) {
  m.def(
      "adaln_fwd(Tensor x, Tensor shift, Tensor scale, Tensor? weight, Tensor? bias, float eps, "
      "Tensor? cu_seqlens=None) -> (Tensor y, Tensor mean, Tensor rstd)");
  m.def(
      "adaln_bwd(Tensor dy, Tensor x, Tensor scale, Tensor? weight, Tensor? bias, Tensor mean, "
      "Tensor rstd, bool[4] output_mask, Tensor? cu_seqlens=None) -> (Tensor dx, Tensor dshift, "
      "Tensor dscale, Tensor dweight, Tensor dbias)");
}

TORCH_LIBRARY_IMPL(adaptiveload, CPU, m) {
  m.impl("adaln_fwd", &adaptiveload::py::adaln_fwd_cpu_kernel);
  m.impl("adaln_bwd", &adaptiveload::py::adaln_bwd_cpu_kernel);
}
