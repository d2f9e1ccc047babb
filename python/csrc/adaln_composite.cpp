// The fused adaLN op's backward written in differentiable ATen ops (the eager formula), for
// double backward (create_graph=True: gradient penalties); see adaln_ops.h. Statistics and
// arithmetic in fp32 (fp64 for float64 x), as the kernels.
#include <ATen/ExpandUtils.h>

#include <array>

#include "adaln_ops.h"

namespace adaptiveload {
namespace py {
namespace {

at::ScalarType compute_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The modulation of every row of x, broadcastable against x: per token and per sample as
// eager PyTorch broadcasts it, segment i's row for each of its rows.
struct RowModulation {
  at::Tensor seg_ids;  // [N] int64: the segment of each row (segments only)
  at::Tensor rows(const at::Tensor& m, const at::Tensor& x) const {
    if (seg_ids.defined()) return m.index_select(0, seg_ids);
    return x.dim() == 3 && m.dim() == 2 ? m.unsqueeze(1) : m;
  }
  // The per-row v summed back to m's shape (over a sample's or a segment's rows).
  at::Tensor reduce(const at::Tensor& v, const at::Tensor& m, const at::Tensor& x) const {
    if (seg_ids.defined()) return at::zeros(m.sizes(), v.options()).index_add(0, seg_ids, v);
    if (x.dim() == 3 && m.dim() == 2) {
      const std::array<int64_t, 3> per_sample = {m.size(0), 1, m.size(1)};
      return at::sum_to(v, at::IntArrayRef(per_sample)).squeeze(1);
    }
    return at::sum_to(v, m.sizes());
  }
};

RowModulation row_modulation(const at::Tensor& x, const c10::optional<at::Tensor>& cu) {
  RowModulation r;
  if (cu.has_value() && cu->defined()) {
    const at::Tensor lengths = cu->slice(0, 1).to(at::kLong) - cu->slice(0, 0, -1).to(at::kLong);
    r.seg_ids = at::repeat_interleave(at::arange(lengths.size(0), lengths.options()), lengths,
                                      /*dim=*/0, /*output_size=*/x.size(0));
  }
  return r;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> adaln_stats_composite(const at::Tensor& x, double eps) {
  const at::Tensor xf = x.to(compute_dtype(x));
  const at::Tensor mean = xf.mean(-1);
  const at::Tensor var = (xf - mean.unsqueeze(-1)).pow(2).mean(-1);
  return {mean, (var + eps).rsqrt()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> adaln_bwd_composite(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& scale,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
    const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 4> mask,
    const c10::optional<at::Tensor>& cu_seqlens) {
  const at::ScalarType cd = compute_dtype(x);
  const RowModulation rm = row_modulation(x, cu_seqlens);
  const at::Tensor xf = x.to(cd), g = dy.to(cd), sc = scale.to(cd);
  const at::Tensor xhat = (xf - mean.to(cd).unsqueeze(-1)) * rstd.to(cd).unsqueeze(-1);
  const bool has_w = weight.has_value() && weight->defined();
  const bool has_b = bias.has_value() && bias->defined();
  const at::Tensor w = has_w ? weight->to(cd) : at::Tensor();
  const at::Tensor nrm = has_w ? xhat * w : xhat;
  const at::Tensor n = has_b ? nrm + bias->to(cd) : nrm;
  const at::Tensor dn = g * (1 + rm.rows(sc, x));
  const at::Tensor dxhat = has_w ? dn * w : dn;
  const at::Tensor c1 = dxhat.mean(-1, /*keepdim=*/true);
  const at::Tensor c2 = (dxhat * xhat).mean(-1, /*keepdim=*/true);
  const at::Tensor dx = (rstd.to(cd).unsqueeze(-1) * (dxhat - c1 - xhat * c2)).to(x.scalar_type());
  const auto none = [&] { return at::empty({0}, x.options()); };
  const auto all_rows = [&](const at::Tensor& v) { return v.reshape({-1, v.size(-1)}).sum(0); };
  at::Tensor dshift = mask[0] ? rm.reduce(g, sc, x).to(scale.scalar_type()) : none();
  at::Tensor dscale = mask[1] ? rm.reduce(g * n, sc, x).to(scale.scalar_type()) : none();
  at::Tensor dweight = mask[2] && has_w ? all_rows(dn * xhat).to(weight->scalar_type()) : none();
  at::Tensor dbias = mask[3] && has_b ? all_rows(dn).to(bias->scalar_type()) : none();
  return {dx, dshift, dscale, dweight, dbias};
}

}  // namespace py
}  // namespace adaptiveload
