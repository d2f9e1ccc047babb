"""WanDiT on packed micro-batches: several samples of different shapes (images, clips of any
length and aspect ratio) as one token sequence, each with its own RoPE grid, text, timestep.

    packed = adaptiveload.packing.pack(latents, model.c.patch, timesteps=t, text=contexts)
    pred = forward_packed(model, packed)           # [N, C*pt*ph*pw], the pack's rows
    preds = unpack(pred, packed)                   # per sample [C, F, H, W]
    # or in one call, with lists: preds = predict_packed(model, latents, t, contexts)

It runs the same layers as WanDiT.forward on [N, D] rows instead of [B, S, D]: the patch
embedding as a matmul per patch (the Conv3d has stride == kernel), 3D RoPE at each sample's
own grid positions, varlen self-attention (each sample attends to itself only) and varlen
cross-attention (each sample to its own text, of its own length), the adaLN modulation and
gates of each sample's timestep on that sample's rows, the modulated head. Timesteps are
per sample [n] or per token [N] (Wan 2.2 style, e.g. a clean first frame). Outputs and every
parameter's gradient equal the model run sample by sample within fp32 rounding
(python/tests/test_wan_dit_packed.py). WanDiT.forward is not changed by this module.
torch.compile(fullgraph=True) traces forward_packed as one graph, checkpointed blocks and
varlen_attention (a custom op) included; it reads the pack's tensors and their sizes, never
its per-sample lists (the RoPE comes from packed.positions), so packs of other layouts cost
one recompile (automatic dynamic shapes) and then share the graph.

The per-sample modulation rows reach the normalised tokens in one place, Segments.modulate
(packing.py, which the diffusers packed forward shares):
with the fused kernel (model.fused) shift / scale [n, D] go to fused_adaln(..., cu_seqlens=)
as they are, and the kernel reads row i on sample i's rows, so no per-token copy is made;
the eager path expands them to [N, D] (repeat_interleave over the segment lengths). The
gates (e[2], e[5]) are expanded per token in both.
"""
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn.functional as F

from ..attention import varlen_attention
from ..packing import Segments, pack, unpack
from .rope import apply_rope, rope_3d_at

__all__ = ["Segments", "forward_packed", "predict_packed", "flow_matching_loss_packed"]


def _self_attention(attn, x, rope, seg: Segments):
    """SelfAttention's computation on packed rows x [N, D]; rope (cos, sin) [N, d/2]."""
    N, D = x.shape
    heads = lambda t: t.view(N, attn.heads, D // attn.heads)  # noqa: E731  [N, H, d]
    cos, sin = rope[0][:, None], rope[1][:, None]  # [N, 1, d/2]: broadcast over heads
    q = apply_rope(heads(attn.norm_q(attn.q(x))), cos, sin)
    k = apply_rope(heads(attn.norm_k(attn.k(x))), cos, sin)
    out = varlen_attention(q, k, heads(attn.v(x)), seg.cu, seg.cu)
    return attn.o(out.reshape(N, D))


def _cross_attention(attn, x, context, seg: Segments):
    """CrossAttention on packed rows x [N, D] to the packed texts context [T, D]."""
    N, D = x.shape
    heads = lambda t: t.view(t.shape[0], attn.heads, D // attn.heads)  # noqa: E731
    q = heads(attn.norm_q(attn.q(x)))
    k, v = heads(attn.norm_k(attn.k(context))), heads(attn.v(context))
    out = varlen_attention(q, k, v, seg.cu, seg.cu_text)
    return attn.o(out.reshape(N, D))


def _block(block, x, e, context, rope, seg: Segments):
    """Block.forward on packed rows: x [N, D], e [n or N, 6, D] fp32, context [T, D]."""
    e = (block.modulation.float() + e).unbind(1)  # six [n or N, D]
    y = _self_attention(block.self_attn, seg.modulate(x, e[0], e[1], block.eps, block.use_fused), rope, seg)
    x = x + (y.float() * seg.rows(e[2])).type_as(x)
    x = x + _cross_attention(block.cross_attn, block.norm3(x), context, seg)
    y = block.ffn(seg.modulate(x, e[3], e[4], block.eps, block.use_fused))
    return x + (y.float() * seg.rows(e[5])).type_as(x)


def _packed_block(block, *args):
    """block.forward_packed(*args), looked up on the instance at call time: a wrapper that
    hooks the method (FSDP2's register_fsdp_forward_method) runs around every call, the
    recomputation under activation checkpointing included."""
    return block.forward_packed(*args)


def _check(model: torch.nn.Module, packed):
    c = model.c
    if tuple(packed.patch) != tuple(c.patch):
        raise ValueError(f"forward_packed: the pack was patchified with {tuple(packed.patch)}, the model's patch "
                         f"is {tuple(c.patch)}; pack(latents, patch=model.c.patch, ...)")
    width = c.in_channels * c.patch[0] * c.patch[1] * c.patch[2]
    if packed.tokens.dim() != 2 or packed.tokens.shape[1] != width:
        raise ValueError(f"forward_packed: packed.tokens must be [N, {width}] ({c.in_channels} channels x patch "
                         f"{tuple(c.patch)}), got {tuple(packed.tokens.shape)}")
    if packed.timesteps is None or packed.text is None:
        missing = "timesteps" if packed.timesteps is None else "text"
        raise ValueError(f"forward_packed: the pack has no {missing}; pack(..., timesteps=t, text=contexts)")
    N, n = packed.tokens.shape[0], packed.cu_seqlens.shape[0] - 1
    if packed.timesteps.dim() != 1 or packed.timesteps.numel() not in (n, N):
        raise ValueError(f"forward_packed: timesteps must be [{n}] (per sample) or [{N}] (per token), got "
                         f"{tuple(packed.timesteps.shape)}")
    if packed.text.dim() != 2 or packed.text.shape[1] != c.text_dim:
        raise ValueError(f"forward_packed: packed.text must be [T, {c.text_dim}], got {tuple(packed.text.shape)}")
    # Per-token timesteps are read as such only when they cannot be per-sample ones (N == n
    # means one token per sample, where the two agree).
    return packed.timesteps.numel() == N and N != n


def forward_packed(model: torch.nn.Module, packed) -> torch.Tensor:
    """The model on a PackedBatch (adaptiveload.packing.pack with model.c.patch, timesteps
    [n] in [0, 1000) or [N] per token, and texts [L_i, text_dim]) -> the patch predictions
    [N, C*pt*ph*pw] in the pack's row order (unpack(out, packed) gives per-sample latents).
    Honours model.fused (fused_adaln) and model.checkpointing (in training mode)."""
    per_token = _check(model, packed)
    c = model.c
    device = packed.tokens.device
    seg = Segments(packed, per_token)
    w = model.patch_embedding.weight
    tokens = F.linear(packed.tokens.to(w.dtype), w.flatten(1), model.patch_embedding.bias)  # [N, D]
    rope = rope_3d_at(c.dim // c.heads, packed.token_positions().to(device))  # [N, d/2] cos, sin
    emb, e = model.embed_time(packed.timesteps, device)  # [n or N, D], [n or N, 6, D]
    context = model.text_embedding(packed.text)  # [T, D]
    for block in model.blocks:
        tokens = model.run_block(_packed_block, block, tokens, e, context, rope, seg)
    hm = (model.head_modulation.float() + emb[:, None]).unbind(1)
    return model.head(seg.modulate(tokens, hm[0], hm[1], c.eps, model.fused))


def predict_packed(model: torch.nn.Module, latents: Sequence[torch.Tensor], t, contexts: Sequence[torch.Tensor],
                   forward: Optional[Callable] = None) -> List[torch.Tensor]:
    """Lists in, list out (Wan's reference code's convention): latents per sample [C, F, H, W],
    t [n] (or [N] per token, in the pack's row order), contexts per sample [L_i, text_dim]
    -> per-sample predictions [C, F, H, W]. forward(packed) -> rows [N, C*pt*ph*pw] runs the
    model (default model.forward_packed; a DistributedDataParallel wrapper around a module
    calling it, for one)."""
    packed = pack(latents, model.c.patch, timesteps=t, text=contexts)
    return unpack((forward or model.forward_packed)(packed), packed)


def flow_matching_loss_packed(model: torch.nn.Module, x0s: Sequence[torch.Tensor], contexts: Sequence[torch.Tensor],
                              generator: Optional[torch.Generator] = None, *, t: Optional[torch.Tensor] = None,
                              noises: Optional[Sequence[torch.Tensor]] = None,
                              forward: Optional[Callable] = None) -> torch.Tensor:
    """wan_dit.flow_matching_loss over one pack: x0s per sample [C, F, H, W], contexts [L_i, D].
    Returns the per-sample mean squared errors [n] (each over its own sample's elements, so the
    pack's loss is their mean, or their sum over the step's samples as train_dit normalises).
    Without t / noises they are drawn sample after sample (t_i, then noise_i) from `generator`,
    the draws flow_matching_loss(model, x0s[i][None], contexts[i][None], generator) makes when
    called for each sample in turn: the same numbers, the same losses. forward: as
    predict_packed's (model is then read for its patch only)."""
    x0s = list(x0s)
    n = len(x0s)
    if (t is None) != (noises is None):
        raise ValueError("flow_matching_loss_packed: give both t [n] and noises (one per sample), or neither")
    if t is None:
        ts, noises = [], []
        for x0 in x0s:
            ts.append(torch.rand(1, device=x0.device, generator=generator))
            noises.append(torch.randn(x0.shape, device=x0.device, dtype=x0.dtype, generator=generator))
        t = torch.cat(ts)
    noises = list(noises)
    if t.numel() != n or len(noises) != n:
        raise ValueError(f"flow_matching_loss_packed: {t.numel()} timesteps and {len(noises)} noises for {n} samples")
    xts = [(1 - ti.to(x0.dtype)) * x0 + ti.to(x0.dtype) * e for x0, ti, e in zip(x0s, t, noises)]
    preds = predict_packed(model, xts, t * 1000, contexts, forward)
    return torch.stack([(p.float() - (e - x0).float()).pow(2).mean() for p, e, x0 in zip(preds, noises, x0s)])
