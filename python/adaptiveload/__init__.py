"""AdaptiveLoad for PyTorch: a cost-balanced batch sampler for video DiT training and a
fused LayerNorm-Modulate (adaLN) op, both over the project's C++ core (adaptiveload._C).

    from adaptiveload import AdaptiveBatchSampler, fused_adaln
    from adaptiveload.nn import AdaLayerNormModulate

See docs/python.md.
"""
import torch  # noqa: F401  (loads libtorch before the extension)

from ._torch_check import check_torch_release

check_torch_release(torch.__version__)
from . import (
    _C,  # noqa: F401  (registers torch.ops.adaptiveload.*)
    nn,
)
from .ops import fused_adaln
from .sampler import AdaptiveBatchSampler, PlannedStep

__all__ = ["AdaptiveBatchSampler", "PlannedStep", "fused_adaln", "nn"]
__version__ = "0.1.0"
