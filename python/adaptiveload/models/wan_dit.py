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

Sequence parallelism (Ulysses, adaptiveload.sequence_parallel): `model(x, t, context, sp=ctx)`
runs the same computation with this rank holding only its shard of the tokens. Patch
embedding (as a matmul over the shard's patches), RoPE (at global positions), the norms,
cross-attention, FFN, adaLN and the head run on the shard; self-attention exchanges q, k, v
with one all-to-all ([B, S/g, 3, H, d] -> [B, S, 3, H/g, d]) and the output with its inverse.
It returns the shard's patch predictions [B, S_p, C*pt*ph*pw] (`patchify` order), not latents;
`flow_matching_loss(..., sp=ctx)` reduces the loss over the group. Without `sp` nothing changes.
"""
import math
from dataclasses import dataclass, replace
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import fused_adaln
from ..patches import grid_positions, patchify, unpatchify  # noqa: F401  (wan_dit.patchify, ... re-exported)
from ..sequence_parallel import SPContext, all_reduce_sum, heads_to_seq, seq_to_heads
from . import wan_dit_packed
from .rope import apply_rope, rope_3d, rope_3d_at  # noqa: F401  (wan_dit.rope_3d_at, ... re-exported)


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

    def forward(self, x, rope, sp: Optional[SPContext] = None, seq_len: int = 0):
        if sp is not None:
            return self.forward_sp(x, rope, sp, seq_len)
        B, S, D = x.shape
        split = lambda t: t.view(B, -1, self.heads, D // self.heads).transpose(1, 2)  # noqa: E731
        q = apply_rope(split(self.norm_q(self.q(x))), *rope)
        k = apply_rope(split(self.norm_k(self.k(x))), *rope)
        out = attention(q, k, split(self.v(x)))
        return self.o(out.transpose(1, 2).reshape(B, S, D))

    def forward_sp(self, x, rope, sp: SPContext, seq_len: int):
        """x [B, S_p, D] this rank's tokens of a seq_len-token sample, rope its rows of the tables.
        q/k RMSNorm spans all heads of a token, so it and RoPE run before the exchange."""
        B, S_p, D = x.shape
        heads = lambda t: t.view(B, S_p, self.heads, D // self.heads)  # noqa: E731  [B, S_p, H, d]
        cos, sin = rope[0][:, None], rope[1][:, None]  # [S_p, 1, d/2]: broadcast over heads
        q = apply_rope(heads(self.norm_q(self.q(x))), cos, sin)
        k = apply_rope(heads(self.norm_k(self.k(x))), cos, sin)
        qkv = seq_to_heads(torch.stack([q, k, heads(self.v(x))], 2), sp, seq_len, seq_dim=1, head_dim=3)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # [B, H/g, S, d] each
        out = heads_to_seq(attention(q, k, v).transpose(1, 2), sp, seq_dim=1, head_dim=2)  # [B, S_p, H, d]
        return self.o(out.reshape(B, S_p, D))


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

    def forward(self, x, e, context, rope, sp: Optional[SPContext] = None, seq_len: int = 0):
        # e: [B, 6, D] fp32 -> shift/scale/gate for attention and feed-forward.
        e = (self.modulation.float() + e).unbind(1)
        y = self.self_attn(self.modulate(x, e[0], e[1]), rope, sp, seq_len)
        x = x + (y.float() * e[2][:, None]).type_as(x)
        x = x + self.cross_attn(self.norm3(x), context)
        y = self.ffn(self.modulate(x, e[3], e[4]))
        return x + (y.float() * e[5][:, None]).type_as(x)

    def forward_packed(self, x, e, context, rope, seg):
        """forward on a pack's rows x [N, D] (models.wan_dit_packed); a method of the block,
        so a wrapper that hooks a module's forward methods (FSDP2's
        register_fsdp_forward_method) sees it."""
        return wan_dit_packed._block(self, x, e, context, rope, seg)


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

    def run_block(self, fn, *args):
        """fn(*args) for one block: under activation checkpointing when it is on and the model
        is training (the unpacked, sequence-parallel and packed forwards all run blocks so)."""
        if self.checkpointing and self.training:
            return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)
        return fn(*args)

    def embed_time(self, t, device):
        """t [B] -> (emb [B, D], e [B, 6, D]), fp32 whatever the autocast."""
        with torch.autocast(device_type=device.type, enabled=False):
            emb = self.time_embedding(sinusoidal_embedding(self.c.freq_dim, t).to(device))
            e = self.time_projection(emb).unflatten(1, (6, self.c.dim))
        return emb, e

    def head_fwd(self, tokens, emb):
        """The head: modulated LayerNorm, then projection back to patches [B, S, C*pt*ph*pw]."""
        hm = (self.head_modulation.float() + emb[:, None]).unbind(1)
        if self.fused:
            y = fused_adaln(tokens, hm[0], hm[1], eps=self.c.eps)
        else:
            y = (F.layer_norm(tokens.float(), (self.c.dim,), eps=self.c.eps) * (1 + hm[1][:, None]) + hm[0][:, None])
            y = y.type_as(tokens)
        return self.head(y)

    def forward(self, x, t, context, *, sp: Optional[SPContext] = None):
        """x [B, C, f, h, w] latents, t [B] in [0, 1000), context [B, L, text_dim] -> [B, C, f, h, w].
        With sp (x, t, context the same on every rank of the group): this rank's shard of the
        patch predictions [B, S_p, C*pt*ph*pw]; see forward_sp."""
        if sp is not None:
            return self.forward_sp(x, t, context, sp)
        B, C, f, h, w = x.shape
        pt, ph, pw = self.c.patch
        grid = (f // pt, h // ph, w // pw)
        tokens = self.patch_embedding(x).flatten(2).transpose(1, 2)  # [B, S, D]
        rope = rope_3d(self.c.dim // self.c.heads, grid, x.device)
        emb, e = self.embed_time(t, x.device)
        context = self.text_embedding(context)
        for block in self.blocks:
            tokens = self.run_block(block, tokens, e, context, rope)
        out = self.head_fwd(tokens, emb)  # [B, S, C*pt*ph*pw]
        out = out.view(B, *grid, C, pt, ph, pw).permute(0, 4, 1, 5, 2, 6, 3, 7)
        return out.reshape(B, C, f, h, w)

    def forward_packed(self, packed) -> torch.Tensor:
        """A PackedBatch (adaptiveload.packing) -> its patch predictions [N, C*pt*ph*pw]; see
        models.wan_dit_packed.forward_packed."""
        return wan_dit_packed.forward_packed(self, packed)

    def forward_sp(self, x, t, context, sp: SPContext):
        """The sequence-parallel forward: the same layers on tokens [start, end) of this rank's
        position (sp.bounds(S)); returns their patch predictions [B, S_p, C*pt*ph*pw].
        unpatchify(unshard(out, sp, S), self.c.patch, x.shape[1:]) is forward(x, t, context)."""
        sp.check_heads(self.c.heads, f"model ({self.c.dim} wide)")
        B, C, f, h, w = x.shape
        pt, ph, pw = self.c.patch
        grid = (f // pt, h // ph, w // pw)
        S = grid[0] * grid[1] * grid[2]
        start, end = sp.bounds(S)
        # The stride == kernel Conv3d is a matmul per patch: only this shard's patches are embedded.
        patches = patchify(x, self.c.patch)[:, start:end]  # [B, S_p, C*pt*ph*pw]
        tokens = F.linear(patches, self.patch_embedding.weight.flatten(1), self.patch_embedding.bias)
        cos, sin = rope_3d(self.c.dim // self.c.heads, grid, x.device)
        rope = (cos[start:end], sin[start:end])  # global positions
        emb, e = self.embed_time(t, x.device)
        context = self.text_embedding(context)
        for block in self.blocks:
            tokens = self.run_block(block, tokens, e, context, rope, sp, S)
        return self.head_fwd(tokens, emb)


def flow_matching_loss(model: WanDiT, x0: torch.Tensor, context: torch.Tensor,
                       generator: Optional[torch.Generator] = None, *, sp: Optional[SPContext] = None) -> torch.Tensor:
    """Rectified-flow objective (Wan's): x_t = (1 - t) x0 + t eps, predict v = eps - x0.
    Returns the per-sample mean squared error [B] (the caller normalises over the step).
    With sp: every rank of the group passes the same x0, context and generator state (the
    same t and noise); each sums its shard's squared errors, the sums are all-reduced over
    the group and divided by the sample's element count, so every rank returns the whole
    sample's loss; backward reaches only this rank's tokens (sum .grad with reduce_gradients)."""
    B = x0.shape[0]
    t = torch.rand(B, device=x0.device, generator=generator)
    noise = torch.randn(x0.shape, device=x0.device, dtype=x0.dtype, generator=generator)
    tt = t.view(B, 1, 1, 1, 1).to(x0.dtype)
    xt = (1 - tt) * x0 + tt * noise
    if sp is not None:
        pred = model(xt, t * 1000, context, sp=sp)  # [B, S_p, C*pt*ph*pw]
        target = patchify(noise - x0, model.c.patch)
        start, end = sp.bounds(target.shape[1])
        partial = (pred.float() - target[:, start:end].float()).pow(2).flatten(1).sum(1)  # [B]
        return all_reduce_sum(partial, sp) / x0[0].numel()
    pred = model(xt, t * 1000, context)
    return (pred.float() - (noise - x0).float()).pow(2).flatten(1).mean(1)
