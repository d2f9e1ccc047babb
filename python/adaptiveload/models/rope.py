"""3D rotary position embedding (Wan's): cos/sin tables at token positions (frame, row,
column) and the rotation; used by the unpacked and the packed forwards (wan_dit,
wan_dit_packed)."""
import torch

from ..patches import grid_positions


def rope_3d_at(head_dim: int, positions: torch.Tensor) -> tuple:
    """cos/sin tables [S, head_dim/2] for 3D RoPE at token positions [S, 3] (frame, row,
    column): the head dim is split between time, height and width as in Wan
    (d - 4*(d//6), 2*(d//6), 2*(d//6)); angles in fp64. Reads no host values, so a packed
    forward's tables trace once for any mix of grids."""
    half = head_dim // 2
    parts = [half - 2 * (half // 3), half // 3, half // 3]
    angles = []
    for axis, n in enumerate(parts):
        inv = 1.0 / (10000 ** (torch.arange(n, dtype=torch.float64, device=positions.device) / max(n, 1)))
        angles.append(positions[:, axis, None].double() * inv[None])  # [S, n]
    ang = torch.cat(angles, dim=-1)  # [S, half]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope_3d(head_dim: int, grid, device) -> tuple:
    """cos/sin tables [S, head_dim/2] for 3D RoPE over a grid (f, h, w), S = f*h*w in
    patchify's order (rope_3d_at at grid_positions)."""
    return rope_3d_at(head_dim, grid_positions(grid, device))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, S, d]: rotate pairs (x[2i], x[2i+1]) by the position's angles."""
    xf = x.float()
    x1, x2 = xf[..., 0::2], xf[..., 1::2]
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    return out.type_as(x)
