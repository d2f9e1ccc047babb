"""The fused adaLN op: y = LayerNorm(x) * (1 + scale) + shift.

The op lives in C++ (torch.ops.adaptiveload.adaln_fwd / adaln_bwd, registered with
TORCH_LIBRARY: CPU, CUDA when built, and Autograd kernels; its fake kernel is in _fake.py);
this module is its Python face. Autograd is the C++ kernel's, so the op differentiates the
same when called as torch.ops.adaptiveload.adaln_fwd directly.
"""
from typing import Optional

import torch

from . import (
    _C,  # noqa: F401  (registers the ops)
    _fake,  # noqa: F401  (registers their fake kernels)
)


def fused_adaln(
    x: torch.Tensor,
    shift: torch.Tensor,
    scale: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    cu_seqlens: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """LayerNorm(x) * (1 + scale) + shift, fused: one read of x and one write of y.

    x: [B, L, D] or [N, D], float32 / bfloat16 / float16, or float64 on the CPU (the fp64
      reference, for gradcheck).
    shift, scale (same shape and dtype, float32 or x's dtype):
      x [B, L, D]: [B, D] or [B, 1, D] (per sample) or [B, L, D] (per token);
      x [N, D]:    [1, D] (all rows) or [N, D] (per row);
      with cu_seqlens: [n, D], one row a segment.
    weight, bias: optional [D], applied to the normalised x before the modulation
      (LayerNorm's elementwise affine).
    cu_seqlens: optional [n + 1] int32 / int64 on x's device (flash-attention's varlen
      offsets): x [N, D] is a packed batch of n segments, rows cu_seqlens[i] to
      cu_seqlens[i + 1] - 1 use modulation row i (empty segments allowed); the offsets must
      start at 0, ascend and end at N (checked: on CUDA that reads them, a synchronisation,
      except while a CUDA graph is captured). Gradients of shift / scale are per segment.
    Statistics and arithmetic are fp32 (fp64 for float64 x); y has x's dtype. Non-contiguous
    inputs are copied. Differentiable twice (create_graph=True): the second order through
    differentiable PyTorch ops (slower, not fused).
    Raises TypeError naming the argument for a non-tensor (or a non-number eps), ValueError
    for a wrong shape, dtype, offset or eps, RuntimeError for inputs on different devices.
    """
    # Types first, where the argument's name is known (the op sees only its schema).
    for name, t, what in (("x", x, "[B, L, D] or [N, D]"), ("shift", shift, "the modulation"),
                          ("scale", scale, "the modulation")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"fused_adaln: {name} must be a torch.Tensor ({what}), got {type(t).__name__}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"fused_adaln: {name} must be a torch.Tensor [D] or None, got {type(t).__name__}")
    if cu_seqlens is not None and not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(
            f"fused_adaln: cu_seqlens must be a torch.Tensor [n + 1] of int32 / int64 offsets or None, "
            f"got {type(cu_seqlens).__name__}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"fused_adaln: eps must be a number in [0, 1e30), got {type(eps).__name__} {eps!r}")
    if not (eps >= 0 and eps < 1e30):  # the op's range; False for NaN
        raise ValueError(f"fused_adaln: eps must be a finite number in [0, 1e30), got {eps!r}")
    return torch.ops.adaptiveload.adaln_fwd(x, shift, scale, weight, bias, float(eps), cu_seqlens)[0]
