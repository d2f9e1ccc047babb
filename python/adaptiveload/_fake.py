"""Fake (meta) kernels of torch.ops.adaptiveload.adaln_fwd / adaln_bwd, for torch.compile,
torch.export, FakeTensor and meta tensors: output shapes and dtypes, no data.

On concrete shapes they run the C++ op's own input checks (adaptiveload._C._adaln_check_*),
so a bad input raises the same ValueError under compile and on the meta device as eagerly.
Under symbolic shapes (dynamic=True) the checks are torch._check calls on the sizes.
"""
import torch

from . import _C

_OK_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)  # float64: CPU reference


def _stats_dtype(x):
    """The saved mean / rstd's dtype (the C++ adaln_stats_dtype): float64 for float64 x, so the
    fp64 reference's backward is fp64 accurate; float32 for every other dtype."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _symbolic(*tensors):
    return any(isinstance(s, torch.SymInt) for t in tensors if t is not None for s in t.shape)


def _check_symbolic(x, shift, scale, weight, bias, cu_seqlens=None):
    torch._check(x.dim() in (2, 3), lambda: f"fused_adaln: x has shape {list(x.shape)}; it must be [B, L, D] or [N, D]")
    if cu_seqlens is not None:
        torch._check(cu_seqlens.dtype in (torch.int32, torch.int64),
                     lambda: f"fused_adaln: cu_seqlens has dtype {cu_seqlens.dtype}; it must be int32 or int64")
        torch._check(cu_seqlens.dim() == 1, lambda: "fused_adaln: cu_seqlens must be [n + 1]")
        torch._check(x.dim() == 2, lambda: "fused_adaln: with cu_seqlens, x must be [N, D] (a packed batch)")
        torch._check(scale.dim() == 2 and scale.shape[0] == cu_seqlens.shape[0] - 1,
                     lambda: "fused_adaln: with cu_seqlens [n + 1], scale and shift must be [n, D]")
    torch._check(shift.shape == scale.shape, lambda: "fused_adaln: shift and scale must have the same shape")
    torch._check(scale.dim() in (2, 3), lambda: f"fused_adaln: scale has shape {list(scale.shape)}")
    torch._check(scale.shape[-1] == x.shape[-1], lambda: "fused_adaln: scale's last dimension must be D = x.shape[-1]")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            torch._check(t.dim() == 1 and t.shape[0] == x.shape[-1], lambda: f"fused_adaln: {name} must be [D]")
    for name, t in (("x", x), ("scale", scale), ("weight", weight), ("bias", bias)):
        if t is not None:
            torch._check(t.dtype in _OK_DTYPES, lambda: f"fused_adaln: {name} has unsupported dtype {t.dtype}")


@torch.library.register_fake("adaptiveload::adaln_fwd")
def _adaln_fwd_fake(x, shift, scale, weight, bias, eps, cu_seqlens=None):
    # cu_seqlens' values are data: the real kernels check them, not this one.
    if _symbolic(x, shift, scale, weight, bias, cu_seqlens):
        _check_symbolic(x, shift, scale, weight, bias, cu_seqlens)
    else:
        _C._adaln_check_fwd(x, shift, scale, weight, bias, eps, cu_seqlens)
    stats, dtype = x.shape[:-1], _stats_dtype(x)
    return x.new_empty(x.shape), x.new_empty(stats, dtype=dtype), x.new_empty(stats, dtype=dtype)


@torch.library.register_fake("adaptiveload::adaln_bwd")
def _adaln_bwd_fake(dy, x, scale, weight, bias, mean, rstd, output_mask, cu_seqlens=None):
    if _symbolic(dy, x, scale, weight, bias, mean, rstd, cu_seqlens):
        _check_symbolic(x, scale, scale, weight, bias, cu_seqlens)
        torch._check(dy.shape == x.shape, lambda: "fused_adaln backward: grad_output must have x's shape")
        for name, t in (("mean", mean), ("rstd", rstd)):
            torch._check(t.dtype == _stats_dtype(x),
                         lambda: f"fused_adaln backward: {name} must be {_stats_dtype(x)} (x is {x.dtype})")
    else:
        _C._adaln_check_bwd(dy, x, scale, weight, bias, mean, rstd, cu_seqlens)

    def none():
        return x.new_empty((0,))

    dshift = scale.new_empty(scale.shape) if output_mask[0] else none()
    dscale = scale.new_empty(scale.shape) if output_mask[1] else none()
    dweight = weight.new_empty(weight.shape) if output_mask[2] and weight is not None else none()
    dbias = bias.new_empty(bias.shape) if output_mask[3] and bias is not None else none()
    return x.new_empty(x.shape), dshift, dscale, dweight, dbias
