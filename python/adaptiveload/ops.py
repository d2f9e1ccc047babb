"""The fused adaLN op: y = LayerNorm(x) * (1 + scale) + shift.

The op lives in C++ (torch.ops.adaptiveload.adaln_fwd / adaln_bwd, registered with
TORCH_LIBRARY: CPU, CUDA when built, Meta and Autograd kernels); this module is its
Python face. Autograd is the C++ kernel's, so the op differentiates the same when called
as torch.ops.adaptiveload.adaln_fwd directly.
"""
from typing import Optional

import torch

from . import _C  # noqa: F401  (registers the ops)


def fused_adaln(
    x: torch.Tensor,
    shift: torch.Tensor,
    scale: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """LayerNorm(x) * (1 + scale) + shift, fused: one read of x and one write of y.

    x: [B, L, D] or [N, D], float32 / bfloat16 / float16.
    shift, scale (same shape and dtype, float32 or x's dtype):
      x [B, L, D]: [B, D] or [B, 1, D] (per sample) or [B, L, D] (per token);
      x [N, D]:    [1, D] (all rows) or [N, D] (per row).
    weight, bias: optional [D], applied to the normalised x before the modulation
      (LayerNorm's elementwise affine).
    Statistics and arithmetic are fp32; y has x's dtype. Non-contiguous inputs are copied.
    Raises ValueError naming the argument for a wrong shape or dtype, RuntimeError for
    inputs on different devices.
    """
    return torch.ops.adaptiveload.adaln_fwd(x, shift, scale, weight, bias, float(eps))[0]
