"""A Wan-2.1-style diffusion transformer for training-time measurements.

Same layer types and data flow as Wan 2.1 (wan/modules/model.py): latents [B, C=16, f, h, w]
-> 1x2x2 patch embedding -> N blocks of (adaLN-modulated self-attention with 3D RoPE and
q/k RMSNorm, cross-attention to text tokens, adaLN-modulated feed-forward) -> modulated head
-> unpatchify. The timestep embedding produces the six modulation vectors per sample (shift,
scale, gate for attention and for the feed-forward), kept in fp32 as Wan does.

The two adaLN sites per block run either eagerly (layer_norm, then * (1 + scale), then
+ shift: what Wan does) or through adaptiveload.fused_adaln, switched by `fused_adaln=`.
Attention uses torch.nn.functional.scaled_dot_product_attention where the torch version has
it, a plain softmax(QK^T)V otherwise.
"""
import math
from dataclasses import dataclass, replace
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import fused_adaln


@dataclass(frozen=True)
class WanDiTConfig:
    dim: int
    ffn_dim: int
    heads: int
    layers: int
    text_len: int
    text_dim: int
    in_channels: int = 16
    patch: tuple = (1, 2, 2)
    freq_dim: int = 256
    eps: float = 1e-6
    preset: str = ""  # the planner's model preset with the same dimensions


CONFIGS: Dict[str, WanDiTConfig] = {
    # Wan 2.1 T2V 1.3B (wan/configs/wan_t2v_1_3B.py); text from umT5-XXL (4096 wide).
    "wan2.1-1.3b": WanDiTConfig(dim=1536, ffn_dim=8960, heads=12, layers=30, text_len=512, text_dim=4096,
                                preset="wan2.1-1.3b"),
    # CPU tests and CI: same structure, small dims (preset presets/models/tiny-dit.json).
    "tiny": WanDiTConfig(dim=64, ffn_dim=128, heads=4, layers=2, text_len=16, text_dim=32, preset="tiny-dit"),
}


def config(name: str, layers: Optional[int] = None) -> WanDiTConfig:
    if name not in CONFIGS:
        raise ValueError(f"unknown model config {name!r}; choose one of {sorted(CONFIGS)}")
    c = CONFIGS[name]
    return replace(c, layers=layers) if layers else c


def sinusoidal_embedding(dim: int, t: torch.Tensor) -> torch.Tensor:
    """[B] timesteps in [0, 1000) -> [B, dim] fp32 (Wan's sinusoidal_embedding_1d)."""
    half = dim // 2
    freqs = torch.pow(10000, -torch.arange(half, dtype=torch.float64, device=t.device) / half)
    args = t.double()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=1).float()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_3d(head_dim: int, grid, device) -> tuple:
    """cos/sin tables [S, head_dim/2] for 3D RoPE: the head dim is split between time, height
    and width as in Wan (d - 4*(d//6), 2*(d//6), 2*(d//6))."""
    f, h, w = grid
    half = head_dim // 2
    parts = [half - 2 * (half // 3), half // 3, half // 3]
    tables = []
    for n, size in zip(parts, (f, h, w)):
        inv = 1.0 / (10000 ** (torch.arange(n, dtype=torch.float64, device=device) / max(n, 1)))
        tables.append(torch.outer(torch.arange(size, dtype=torch.float64, device=device), inv))
    ft, ht, wt = tables
    ang = torch.cat(
        [
            ft[:, None, None, :].expand(f, h, w, -1),
            ht[None, :, None, :].expand(f, h, w, -1),
            wt[None, None, :, :].expand(f, h, w, -1),
        ],
        dim=-1,
    ).reshape(f * h * w, half)
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, S, d]: rotate pairs (x[2i], x[2i+1]) by the position's angles."""
    xf = x.float()
    x1, x2 = xf[..., 0::2], xf[..., 1::2]
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    return out.type_as(x)


def attention(q, k, v):
    """[B, heads, S, d] each."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.matmul(torch.softmax(scores.float(), dim=-1).type_as(q), v)


class SelfAttention(nn.Module):
    def __init__(self, c: WanDiTConfig):
        super().__init__()
        self.heads = c.heads
        self.q, self.k, self.v, self.o = (nn.Linear(c.dim, c.dim) for _ in range(4))
        self.norm_q, self.norm_k = RMSNorm(c.dim, c.eps), RMSNorm(c.dim, c.eps)

    def forward(self, x, rope):
        B, S, D = x.shape
        split = lambda t: t.view(B, -1, self.heads, D // self.heads).transpose(1, 2)  # noqa: E731
        q = apply_rope(split(self.norm_q(self.q(x))), *rope)
        k = apply_rope(split(self.norm_k(self.k(x))), *rope)
        out = attention(q, k, split(self.v(x)))
        return self.o(out.transpose(1, 2).reshape(B, S, D))


class CrossAttention(nn.Module):
    def __init__(self, c: WanDiTConfig):
        super().__init__()
        self.heads = c.heads
        self.q, self.k, self.v, self.o = (nn.Linear(c.dim, c.dim) for _ in range(4))
        self.norm_q, self.norm_k = RMSNorm(c.dim, c.eps), RMSNorm(c.dim, c.eps)

    def forward(self, x, context):
        B, S, D = x.shape
        split = lambda t: t.view(B, -1, self.heads, D // self.heads).transpose(1, 2)  # noqa: E731
        out = attention(split(self.norm_q(self.q(x))), split(self.norm_k(self.k(context))), split(self.v(context)))
        return self.o(out.transpose(1, 2).reshape(B, S, D))


class Block(nn.Module):
    def __init__(self, c: WanDiTConfig, use_fused: bool):
        super().__init__()
        self.eps = c.eps
        self.use_fused = use_fused
        self.self_attn = SelfAttention(c)
        self.norm3 = nn.LayerNorm(c.dim, eps=c.eps, elementwise_affine=True)  # cross_attn_norm
        self.cross_attn = CrossAttention(c)
        self.ffn = nn.Sequential(nn.Linear(c.dim, c.ffn_dim), nn.GELU(approximate="tanh"), nn.Linear(c.ffn_dim, c.dim))
        self.modulation = nn.Parameter(torch.randn(1, 6, c.dim) / c.dim**0.5)

    def modulate(self, x, shift, scale):
        """The adaLN site: LayerNorm(x) * (1 + scale) + shift; shift/scale [B, D] fp32."""
        if self.use_fused:
            return fused_adaln(x, shift, scale, eps=self.eps)
        y = F.layer_norm(x.float(), (x.shape[-1],), eps=self.eps)  # Wan: norm in fp32, modulation fp32
        return (y * (1 + scale[:, None]) + shift[:, None]).type_as(x)

    def forward(self, x, e, context, rope):
        # e: [B, 6, D] fp32 -> shift/scale/gate for attention and feed-forward.
        e = (self.modulation.float() + e).unbind(1)
        y = self.self_attn(self.modulate(x, e[0], e[1]), rope)
        x = x + (y.float() * e[2][:, None]).type_as(x)
        x = x + self.cross_attn(self.norm3(x), context)
        y = self.ffn(self.modulate(x, e[3], e[4]))
        return x + (y.float() * e[5][:, None]).type_as(x)


class WanDiT(nn.Module):
    def __init__(self, c: WanDiTConfig, *, fused_adaln: bool = False, checkpointing: bool = False):
        super().__init__()
        self.c = c
        self.checkpointing = checkpointing
        pt, ph, pw = c.patch
        self.patch_embedding = nn.Conv3d(c.in_channels, c.dim, kernel_size=c.patch, stride=c.patch)
        self.text_embedding = nn.Sequential(nn.Linear(c.text_dim, c.dim), nn.GELU(approximate="tanh"),
                                            nn.Linear(c.dim, c.dim))
        self.time_embedding = nn.Sequential(nn.Linear(c.freq_dim, c.dim), nn.SiLU(), nn.Linear(c.dim, c.dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(c.dim, 6 * c.dim))
        self.blocks = nn.ModuleList(Block(c, fused_adaln) for _ in range(c.layers))
        self.head_modulation = nn.Parameter(torch.randn(1, 2, c.dim) / c.dim**0.5)
        self.head = nn.Linear(c.dim, c.in_channels * pt * ph * pw)
        self.fused = fused_adaln

    def set_fused_adaln(self, on: bool) -> None:
        self.fused = on
        for b in self.blocks:
            b.use_fused = on

    def forward(self, x, t, context):
        """x [B, C, f, h, w] latents, t [B] in [0, 1000), context [B, L, text_dim] -> [B, C, f, h, w]."""
        B, C, f, h, w = x.shape
        pt, ph, pw = self.c.patch
        grid = (f // pt, h // ph, w // pw)
        tokens = self.patch_embedding(x).flatten(2).transpose(1, 2)  # [B, S, D]
        rope = rope_3d(self.c.dim // self.c.heads, grid, x.device)
        with torch.autocast(device_type=x.device.type, enabled=False):
            emb = self.time_embedding(sinusoidal_embedding(self.c.freq_dim, t).to(x.device))  # [B, D] fp32
            e = self.time_projection(emb).unflatten(1, (6, self.c.dim))  # [B, 6, D] fp32
        context = self.text_embedding(context)
        for block in self.blocks:
            if self.checkpointing and self.training:
                tokens = torch.utils.checkpoint.checkpoint(block, tokens, e, context, rope, use_reentrant=False)
            else:
                tokens = block(tokens, e, context, rope)
        # Head: modulated LayerNorm then projection back to patches.
        hm = (self.head_modulation.float() + emb[:, None]).unbind(1)
        if self.fused:
            y = fused_adaln(tokens, hm[0], hm[1], eps=self.c.eps)
        else:
            y = (F.layer_norm(tokens.float(), (self.c.dim,), eps=self.c.eps) * (1 + hm[1][:, None]) + hm[0][:, None])
            y = y.type_as(tokens)
        out = self.head(y)  # [B, S, C*pt*ph*pw]
        out = out.view(B, *grid, C, pt, ph, pw).permute(0, 4, 1, 5, 2, 6, 3, 7)
        return out.reshape(B, C, f, h, w)


def flow_matching_loss(model: WanDiT, x0: torch.Tensor, context: torch.Tensor,
                       generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Rectified-flow objective (Wan's): x_t = (1 - t) x0 + t eps, predict v = eps - x0.
    Returns the per-sample mean squared error [B] (the caller normalises over the step)."""
    B = x0.shape[0]
    t = torch.rand(B, device=x0.device, generator=generator)
    noise = torch.randn(x0.shape, device=x0.device, dtype=x0.dtype, generator=generator)
    tt = t.view(B, 1, 1, 1, 1).to(x0.dtype)
    xt = (1 - tt) * x0 + tt * noise
    pred = model(xt, t * 1000, context)
    return (pred.float() - (noise - x0).float()).pow(2).flatten(1).mean(1)
