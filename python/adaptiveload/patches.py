"""Latents as patch tokens: the token order and features that the Wan-style DiT's patch
embedding and head use (models.wan_dit), that a pack concatenates (packing) and that the
sequence-parallel loss shards. The lowest layer of the model code: torch only."""
import torch

__all__ = ["grid_positions", "patchify", "unpatchify"]


def grid_positions(grid, device=None) -> torch.Tensor:
    """[f*h*w, 3] int64: each token's (frame, row, column) in a patch grid (f, h, w), in
    patchify's token order."""
    f, h, w = grid
    axes = [torch.arange(n, device=device) for n in (f, h, w)]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(f * h * w, 3)


def patchify(x: torch.Tensor, patch) -> torch.Tensor:
    """[B, C, f, h, w] -> [B, S, C*pt*ph*pw]: token order (f', h', w') as the patch embedding
    flattens it, features (C, pt, ph, pw) as the head emits them."""
    B, C, f, h, w = x.shape
    pt, ph, pw = patch
    x = x.view(B, C, f // pt, pt, h // ph, ph, w // pw, pw).permute(0, 2, 4, 6, 1, 3, 5, 7)
    return x.reshape(B, (f // pt) * (h // ph) * (w // pw), C * pt * ph * pw)


def unpatchify(tokens: torch.Tensor, patch, shape) -> torch.Tensor:
    """The inverse of patchify: [B, S, C*pt*ph*pw] -> [B, C, f, h, w] (shape = (C, f, h, w))."""
    C, f, h, w = shape
    pt, ph, pw = patch
    B = tokens.shape[0]
    out = tokens.view(B, f // pt, h // ph, w // pw, C, pt, ph, pw).permute(0, 4, 1, 5, 2, 6, 3, 7)
    return out.reshape(B, C, f, h, w)
