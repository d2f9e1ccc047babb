"""One call makes a diffusers `WanTransformer3DModel` use adaptiveload.fused_adaln; another
runs it on a packed micro-batch.

    from diffusers import WanTransformer3DModel
    from adaptiveload.diffusers import packed_forward, use_fused_adaln

    model = WanTransformer3DModel(...)   # or .from_pretrained(...)
    use_fused_adaln(model)               # before torch.compile, DDP or FSDP wrapping

    preds = packed_forward(model, latents, timesteps, texts)   # a pack of samples of any shapes
    # (lists of per-sample [C, F, H, W] latents and [L_i, D] texts)

The code is in two layers: diffusers_adaln.py (the fused adaLN patch, and the recognition of
the installed diffusers' Wan code that both calls rely on) and diffusers_packed.py (the packed
forward, on top of it); this module names what users import from either.
"""
from .diffusers_adaln import (
    KNOWN_SOURCES,
    UnrecognisedWanModelError,
    UnsupportedWanModelError,
    is_fused,
    restore_eager_adaln,
    use_fused_adaln,
)
from .diffusers_packed import packed_forward

__all__ = ["use_fused_adaln", "restore_eager_adaln", "is_fused", "packed_forward", "UnrecognisedWanModelError",
           "UnsupportedWanModelError", "KNOWN_SOURCES"]
