"""torch.nn modules over the fused ops."""
from typing import Optional

import torch

from . import _checks
from .ops import fused_adaln


class AdaLayerNormModulate(torch.nn.Module):
    """adaLN of a DiT block: LayerNorm(x) * (1 + scale) + shift, fused.

    forward(x, shift, scale, cu_seqlens=None): shapes as in adaptiveload.fused_adaln (with
    cu_seqlens, x [N, D] is a packed batch and shift / scale [n, D] one row a segment). With
    elementwise_affine=True the LayerNorm has a learnable weight (ones) and bias (zeros)
    applied before the modulation, as in CogVideoX; Wan 2.1 uses elementwise_affine=False.
    """

    def __init__(
        self,
        dim: int,
        eps: float = 1e-6,
        elementwise_affine: bool = False,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ):
        super().__init__()
        where = "AdaLayerNormModulate: "
        self.dim = _checks.integer(dim, where + "dim", 1, 2**31 - 1, " (the hidden size D)")
        self.eps = _checks.real(eps, where + "eps", 0.0, 1e30, hint=" (fused_adaln's range)", hi_open=True)
        self.elementwise_affine = _checks.flag(elementwise_affine, where + "elementwise_affine")
        if self.elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(dim, device=device, dtype=dtype))
            self.bias = torch.nn.Parameter(torch.zeros(dim, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(
        self, x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, cu_seqlens: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"AdaLayerNormModulate: x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.dim:
            raise ValueError(
                f"AdaLayerNormModulate(dim={self.dim}): x has shape {list(x.shape)}; "
                f"its last dimension must be {self.dim}"
            )
        return fused_adaln(x, shift, scale, self.weight, self.bias, self.eps, cu_seqlens)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
