// CUDA kernels of the fused adaLN op (compiled when setup.py builds a CUDAExtension, which
// defines AL_WITH_CUDA): fill AdalnParams with device pointers and call cuda/adaln_cuda.h on
// the current stream; the backward's workspace comes from PyTorch's caching allocator.
#ifdef AL_WITH_CUDA

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "adaln_args.h"
#include "adaln_cuda.h"
#include "adaln_ops.h"

namespace adaptiveload {
namespace py {
namespace {

void check_cuda_limits(const AdalnLayout& lay) {
  TORCH_CHECK_VALUE(
      !adaln_uses_f64(lay),
      "fused_adaln: float64 runs on the CPU only (through the fp64 "
      "reference, for gradcheck); the CUDA kernels take float32, bfloat16 or float16");
  TORCH_CHECK_VALUE(lay.dim <= adaln_cuda_max_dim(), "fused_adaln: D = ", lay.dim,
                    " exceeds the CUDA kernels' limit of ", adaln_cuda_max_dim());
}

// The offsets' values, read on the host (one small device-to-host copy: a synchronisation
// of the current stream), except while the stream is being captured into a CUDA graph,
// where a copy cannot run: then they are not checked (the kernels stay inside the tensors
// and end with any offsets, but give wrong results for bad ones; cuda/adaln_cuda.h).
void check_cu_seqlens(const AdalnLayout& lay, const c10::optional<at::Tensor>& cu) {
  if (!lay.segments) return;
  if (c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) return;
  adaln_check_cu_seqlens_values(lay, *cu);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> adaln_fwd_cuda_kernel(
    const at::Tensor& x_in, const at::Tensor& shift_in, const at::Tensor& scale_in,
    const c10::optional<at::Tensor>& weight_in, const c10::optional<at::Tensor>& bias_in,
    double eps, const c10::optional<at::Tensor>& cu_in) {
  const AdalnLayout lay =
      adaln_check_inputs(x_in, shift_in, scale_in, weight_in, bias_in, eps, cu_in);
  check_cuda_limits(lay);
  const c10::cuda::CUDAGuard device_guard(x_in.device());
  check_cu_seqlens(lay, cu_in);
  const at::Tensor x = x_in.contiguous(), shift = shift_in.contiguous(),
                   scale = scale_in.contiguous();
  const auto weight = contiguous_or_none(weight_in), bias = contiguous_or_none(bias_in);
  const auto cu = contiguous_or_none(cu_in);
  AdalnFwdOut o = adaln_fwd_outputs(x, adaln_stats_scalar_type(lay));  // float32 here
  AdalnParams p = adaln_params(lay, eps);
  p.x = x.data_ptr(), p.shift = shift.data_ptr(), p.scale = scale.data_ptr();
  p.weight = ptr_or_null(weight), p.bias = ptr_or_null(bias), p.cu_seqlens = ptr_or_null(cu);
  p.y = o.y.data_ptr();
  set_stats_ptrs(p, o.mean, o.rstd);
  void* stream = at::cuda::getCurrentCUDAStream().stream();
  run_kernel("fused_adaln", [&] { adaln_fwd_cuda(p, stream); });
  return {o.y, o.mean, o.rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> adaln_bwd_cuda_kernel(
    const at::Tensor& dy_in, const at::Tensor& x_in, const at::Tensor& scale_in,
    const c10::optional<at::Tensor>& weight_in, const c10::optional<at::Tensor>& bias_in,
    const at::Tensor& mean_in, const at::Tensor& rstd_in, std::array<bool, 4> mask,
    const c10::optional<at::Tensor>& cu_in) {
  const AdalnLayout lay =
      adaln_check_inputs(x_in, scale_in, scale_in, weight_in, bias_in, 0.0, cu_in);
  check_cuda_limits(lay);  // before the statistics' dtype check: float64 gets its own message
  adaln_check_bwd_inputs(lay, dy_in, x_in, mean_in, rstd_in);
  const c10::cuda::CUDAGuard device_guard(x_in.device());
  check_cu_seqlens(lay, cu_in);
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
  at::Tensor workspace;
  run_kernel("fused_adaln backward", [&] {
    const size_t bytes = adaln_bwd_cuda_workspace_bytes(p);
    if (bytes > 0) {
      workspace = at::empty({int64_t(bytes)}, x.options().dtype(at::kByte));
      p.workspace = workspace.data_ptr(), p.workspace_bytes = bytes;
    }
    adaln_bwd_cuda(p, at::cuda::getCurrentCUDAStream().stream());
  });
  return {o.dx, o.dshift, o.dscale, o.dweight, o.dbias};
}

}  // namespace
}  // namespace py
}  // namespace adaptiveload

TORCH_LIBRARY_IMPL(adaptiveload, CUDA, m) {
  m.impl("adaln_fwd", &adaptiveload::py::adaln_fwd_cuda_kernel);
  m.impl("adaln_bwd", &adaptiveload::py::adaln_bwd_cuda_kernel);
}

#endif  // AL_WITH_CUDA
