// Autograd kernel of the fused adaLN op (C++ torch::autograd::Function, registered under the
// Autograd key like torchvision's ops): the forward calls adaln_fwd below autograd and saves
// x, scale, weight, bias and the per-row mean / rstd (fp64 for fp64 x, else fp32); the
// backward calls adaln_bwd, asking only for the gradients autograd needs. adaln_bwd itself is
// not differentiable (double backward raises).
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
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
                               const c10::optional<at::Tensor>& bias, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, mean, rstd] = call_adaln_fwd(x, shift, scale, weight, bias, eps);
    const at::Tensor w = weight.has_value() ? *weight : at::Tensor();
    const at::Tensor b = bias.has_value() ? *bias : at::Tensor();
    ctx->save_for_backward({x, scale, w, b, mean, rstd});
    ctx->mark_non_differentiable({mean, rstd});
    return {y, mean, rstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &scale = saved[1], &w = saved[2], &b = saved[3];
    const at::Tensor &mean = saved[4], &rstd = saved[5];
    // Edges exist only for tensor inputs that were given: x 0, shift 1, scale 2, then
    // weight and bias when present.
    const size_t w_edge = 3, b_edge = 3 + (w.defined() ? 1 : 0);
    std::array<bool, 4> mask = {ctx->needs_input_grad(1), ctx->needs_input_grad(2),
                                w.defined() && ctx->needs_input_grad(w_edge),
                                b.defined() && ctx->needs_input_grad(b_edge)};
    at::Tensor dy = grads[0];
    if (!dy.defined()) dy = at::zeros_like(x);  // y unused: only mean / rstd were
    auto [dx, dshift, dscale, dweight, dbias] =
        call_adaln_bwd(dy, x, scale, opt(w), opt(b), mean, rstd, mask);
    // The op returns empty [0] tensors for gradients not asked for; autograd wants none.
    const auto keep = [](bool wanted, const at::Tensor& g) { return wanted ? g : at::Tensor(); };
    return {dx,
            keep(mask[0], dshift),
            keep(mask[1], dscale),
            keep(mask[2], dweight),
            keep(mask[3], dbias),
            at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> adaln_fwd_autograd(
    const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias, double eps) {
  variable_list out = AdalnFunction::apply(x, shift, scale, weight, bias, eps);
  return {out[0], out[1], out[2]};
}

}  // namespace
}  // namespace py
}  // namespace adaptiveload

TORCH_LIBRARY_IMPL(adaptiveload, Autograd, m) {
  m.impl("adaln_fwd", &adaptiveload::py::adaln_fwd_autograd);
  m.impl("adaln_bwd", torch::autograd::autogradNotImplementedFallback());
}
