// Autograd kernels of the fused adaLN op (C++ torch::autograd::Function, registered under the
// Autograd key like torchvision's ops). adaln_fwd: the forward calls adaln_fwd below autograd
// and saves x, scale, weight, bias, cu_seqlens and the per-row mean / rstd (fp64 for fp64 x,
// else fp32); the backward calls adaln_bwd, asking only for the gradients autograd needs.
// Double backward (create_graph=True): the backward then recomputes mean / rstd from x in
// differentiable ops and calls adaln_bwd with them, whose Autograd kernel, seeing inputs that
// require grad under grad mode, computes it in differentiable ATen ops (adaln_bwd_composite),
// so that autograd can differentiate the gradients again. Without grad mode (every first-order
// backward, and AOTAutograd's traced backward) adaln_bwd runs the fused kernels.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "adaln_ops.h"

namespace adaptiveload {
namespace py {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

c10::optional<at::Tensor> opt(const at::Tensor& t) {
  return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
}

class AdalnFunction : public torch::autograd::Function<AdalnFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& shift,
                               const at::Tensor& scale, const c10::optional<at::Tensor>& weight,
                               const c10::optional<at::Tensor>& bias, double eps,
                               const c10::optional<at::Tensor>& cu_seqlens) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, mean, rstd] = call_adaln_fwd(x, shift, scale, weight, bias, eps, cu_seqlens);
    const at::Tensor w = weight.has_value() ? *weight : at::Tensor();
    const at::Tensor b = bias.has_value() ? *bias : at::Tensor();
    const at::Tensor cu = cu_seqlens.has_value() ? *cu_seqlens : at::Tensor();
    ctx->save_for_backward({x, scale, w, b, mean, rstd, cu});
    ctx->saved_data["eps"] = eps;
    ctx->mark_non_differentiable({mean, rstd});
    return {y, mean, rstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &scale = saved[1], &w = saved[2], &b = saved[3];
    const at::Tensor& cu = saved[6];
    at::Tensor mean = saved[4], rstd = saved[5];
    // Edges exist only for tensor inputs that were given: x 0, shift 1, scale 2, then
    // weight and bias when present (cu_seqlens is not differentiable).
    const size_t w_edge = 3, b_edge = 3 + (w.defined() ? 1 : 0);
    std::array<bool, 4> mask = {ctx->needs_input_grad(1), ctx->needs_input_grad(2),
                                w.defined() && ctx->needs_input_grad(w_edge),
                                b.defined() && ctx->needs_input_grad(b_edge)};
    at::Tensor dy = grads[0];
    if (!dy.defined()) dy = at::zeros_like(x);  // y unused: only mean / rstd were
    if (at::GradMode::is_enabled())  // create_graph=True: the statistics as functions of x
      std::tie(mean, rstd) = adaln_stats_composite(x, ctx->saved_data["eps"].toDouble());
    auto [dx, dshift, dscale, dweight, dbias] =
        call_adaln_bwd(dy, x, scale, opt(w), opt(b), mean, rstd, mask, opt(cu));
    // The op returns empty [0] tensors for gradients not asked for; autograd wants none.
    const auto keep = [](bool wanted, const at::Tensor& g) { return wanted ? g : at::Tensor(); };
    return {dx,
            keep(mask[0], dshift),
            keep(mask[1], dscale),
            keep(mask[2], dweight),
            keep(mask[3], dbias),
            at::Tensor(),
            at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> adaln_fwd_autograd(
    const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias, double eps,
    const c10::optional<at::Tensor>& cu_seqlens) {
  variable_list out = AdalnFunction::apply(x, shift, scale, weight, bias, eps, cu_seqlens);
  return {out[0], out[1], out[2]};
}

bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }
bool requires_grad(const c10::optional<at::Tensor>& t) {
  return t.has_value() && requires_grad(*t);
}

// adaln_bwd under autograd: the fused kernels below autograd, whose outputs carry no history,
// unless grad mode is on and an input requires grad (differentiating a gradient): then the
// differentiable composite.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> adaln_bwd_autograd(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
    const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 4> mask,
    const c10::optional<at::Tensor>& cu_seqlens) {
  if (at::GradMode::is_enabled() &&
      (requires_grad(dy) || requires_grad(x) || requires_grad(scale) || requires_grad(weight) ||
       requires_grad(bias) || requires_grad(mean) || requires_grad(rstd)))
    return adaln_bwd_composite(dy, x, scale, weight, bias, mean, rstd, mask, cu_seqlens);
  at::AutoDispatchBelowADInplaceOrView guard;
  return call_adaln_bwd(dy, x, scale, weight, bias, mean, rstd, mask, cu_seqlens);
}

}  // namespace
}  // namespace py
}  // namespace adaptiveload

TORCH_LIBRARY_IMPL(adaptiveload, Autograd, m) {
  m.impl("adaln_fwd", &adaptiveload::py::adaln_fwd_autograd);
  m.impl("adaln_bwd", &adaptiveload::py::adaln_bwd_autograd);
}
