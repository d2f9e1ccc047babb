"""diffusers' WanTransformer3DModel on a packed micro-batch: several samples of different
shapes (images, clips of any length and aspect ratio) as one token sequence, each with its own
RoPE grid, text and timestep.

    from adaptiveload.diffusers import packed_forward

    preds = packed_forward(model, latents, timesteps, texts)
    # latents: per sample [C, F, H, W]; texts: per sample [L_i, text_dim];
    # timesteps: [n] (one per sample), or a list of n tensors each [F'*H'*W'] (one per token,
    #   Wan 2.2 TI2V's timestep[b] of that sample alone; a one-element entry is per sample);
    # preds: per sample [C_out, F, H, W], what model(latent[None], t[None], text[None]) gives.

It is diffusers 0.42.1's WanTransformer3DModel.forward / WanTransformerBlock.forward /
WanAttnProcessor.__call__ (Apache-2.0, The Wan Team and The HuggingFace Team) on [N, D] rows
instead of [B, L, D]: the patch embedding as a matmul on patchified rows (its Conv3d has
stride == kernel), each sample's RoPE as model.rope gives it for that sample alone (its tables
gathered at each token's position), varlen self-attention and varlen cross-attention to each
sample's own text (attention.varlen_attention, whatever diffusers attention backend is set),
the adaLN sites through fused_adaln with cu_seqlens (one modulation row a sample; per token,
one a row), diffusers' own condition embedder, projections, qk norms and feed-forward
modules, and the head unpatchified per sample. Outputs and every parameter's gradient equal
the unpatched model run sample by sample within fp32 rounding
(python/tests/test_diffusers_packed.py).
Gradient checkpointing follows the model's (model.enable_gradient_checkpointing(), through
its _gradient_checkpointing_func as diffusers' forward does); use_fused_adaln applied or
not makes no difference (neither forward is called). Dtypes are diffusers': the latents in
the patch embedding's dtype, fp32 modulation, autocast as the model's forward sees it.

torch.compile(packed_forward) traces the layers (_layers: embeddings, blocks, head) as one
graph with no break, gradient checkpointing included (Dynamo traces the checkpointed blocks);
varlen_attention's sdpa backend is a custom op whose offsets are read only when the graph
runs. The checks (source hashes), the packing (host-side offsets and grids) and the
per-sample unpacking run eagerly before and after it (compiler.disable), so packed_forward as
a whole is not fullgraph=True; its layers are. The graph reads the pack's tensors and sizes,
not its per-sample lists: a size seen changing for the first time (tokens, samples, text)
costs one recompile, after which Dynamo treats it as symbolic (automatic dynamic shapes), so
after a few packs every layout reuses the same graph.

It runs only when the installed diffusers' source of every method it reproduces or relies on
hashes to a version in diffusers.KNOWN_SOURCES and the modules are the expected types;
otherwise UnrecognisedWanModelError. A model it knows with a feature it does not support
(image conditioning, context parallelism, hooks on modules whose forward it does not call)
raises UnsupportedWanModelError. Either way nothing is run or changed.
"""
import dataclasses
import math
from typing import List, Sequence

import torch
import torch.nn.functional as F
from diffusers.models.transformers import transformer_wan
from torch import nn

from . import diffusers_adaln as _wan
from .attention import varlen_attention
from .ops import fused_adaln
from .packing import Segments, pack, unpack

__all__ = ["packed_forward"]

API = "packed_forward"


def _unsupported(where: str, what: str, todo: str) -> _wan.UnsupportedWanModelError:
    return _wan.UnsupportedWanModelError(f"adaptiveload.diffusers.packed_forward: {where}: {what}, which the packed "
                                         f"forward does not support; nothing was run or changed. {todo}")


def _check_hooks(module: nn.Module, where: str, instance_forward: bool = True) -> None:
    # Hooks on a module whose forward packed_forward bypasses would silently not run; so would an
    # instance-level forward (accelerate's hooks set one; the model's and the blocks' are checked
    # by _check_model, which accepts use_fused_adaln's).
    registry = getattr(module, "_diffusers_hook", None)
    names = [*(f"torch forward pre-hook {h!r}" for h in module._forward_pre_hooks.values()),
             *(f"torch forward hook {h!r}" for h in module._forward_hooks.values()),
             *(f"diffusers hook '{k}'" for k in (getattr(registry, "hooks", None) or {}))]
    if instance_forward and "forward" in module.__dict__:
        names.append(f"an instance-level forward {module.__dict__['forward']!r}")
    if names:
        raise _unsupported(where, f"it has {', '.join(names)}", "packed_forward computes this module's forward "
                           "itself, so it would not run them (FSDP2's fully_shard on the blocks, diffusers' caching or "
                           "layerwise casting hooks, ...): remove them, or run the model's own forward per sample.")


def _check_attention(attn, where: str, cross: bool) -> None:
    if not isinstance(attn, transformer_wan.WanAttention):
        raise _wan._refuse(where, f"expected diffusers WanAttention, got {_wan._type_name(type(attn))}", API)
    _wan._check_method(type(attn), "WanAttention.forward", where, API)
    _check_hooks(attn, where)
    proc = attn.processor
    if type(proc) is not transformer_wan.WanAttnProcessor:
        raise _wan._refuse(where, f"processor is {_wan._type_name(type(proc))}, expected diffusers WanAttnProcessor",
                           API)
    _wan._check_method(type(proc), "WanAttnProcessor.__call__", where + ".processor", API)
    for name in ("norm_q", "norm_k"):
        if not isinstance(getattr(attn, name), nn.RMSNorm):
            raise _wan._refuse(f"{where}.{name}", f"expected torch.nn.RMSNorm, got "
                               f"{_wan._type_name(type(getattr(attn, name)))}", API)
    if getattr(proc, "_parallel_config", None) is not None:
        raise _unsupported(where, "context parallelism is configured (processor._parallel_config)",
                           "A pack runs whole on one device (each sample's sequence is not split over ranks), so "
                           "diffusers' context-parallel attention would not be applied: build the model without "
                           "a parallel config for packs, or run its own forward sample by sample.")
    if cross and attn.add_k_proj is not None:
        raise _unsupported(where, f"image conditioning keys and values (added_kv_proj_dim="
                           f"{attn.added_kv_proj_dim}, Wan 2.1 I2V / FLF2V)", "Packs carry a text per sample, no "
                           "image context: run an image-to-video model's own forward sample by sample.")


@torch.compiler.disable  # host-side checks (source hashes): run eagerly, before the traced forward
def _check(model) -> None:
    """Refuses (raising, changing nothing) a model or diffusers version this module does not know."""
    _wan._check_model(model, API)
    _check_hooks(model, "model", instance_forward=False)
    c = model.config
    patch = tuple(c.patch_size)
    emb = model.condition_embedder
    if not isinstance(emb, transformer_wan.WanTimeTextImageEmbedding):
        raise _wan._refuse("model.condition_embedder", "expected diffusers WanTimeTextImageEmbedding, got "
                           f"{_wan._type_name(type(emb))}", API)
    _wan._check_method(type(emb), "WanTimeTextImageEmbedding.forward", "model.condition_embedder", API)
    if emb.image_embedder is not None:
        raise _unsupported("model.condition_embedder", f"an image embedder (image_dim={c.image_dim}, Wan 2.1 I2V / "
                           "FLF2V encoder_hidden_states_image)", "Packs carry a text per sample, no image context: "
                           "run an image-to-video model's own forward sample by sample.")
    rope = model.rope
    if not isinstance(rope, transformer_wan.WanRotaryPosEmbed) or tuple(rope.patch_size) != patch:
        raise _wan._refuse("model.rope", f"expected diffusers WanRotaryPosEmbed of patch {patch}, got "
                           f"{_wan._type_name(type(rope))}{tuple(getattr(rope, 'patch_size', ()))}", API)
    _wan._check_method(type(rope), "WanRotaryPosEmbed.forward", "model.rope", API)
    conv = model.patch_embedding
    if not (type(conv) is nn.Conv3d and tuple(conv.kernel_size) == patch and tuple(conv.stride) == patch
            and tuple(conv.padding) == (0, 0, 0) and tuple(conv.dilation) == (1, 1, 1) and conv.groups == 1
            and conv.padding_mode == "zeros"):
        raise _wan._refuse("model.patch_embedding", f"expected torch.nn.Conv3d with kernel_size == stride == "
                           f"patch_size {patch}, no padding, dilation or groups; got {conv!r}", API)
    _check_hooks(conv, "model.patch_embedding")
    _wan._check_source(transformer_wan._get_qkv_projections, "transformer_wan._get_qkv_projections",
                       "transformer_wan._get_qkv_projections", "diffusers", API)
    for i, block in enumerate(model.blocks):
        where = f"model.blocks[{i}]"
        _check_hooks(block, where, instance_forward=False)
        _check_attention(block.attn1, where + ".attn1", cross=False)
        _check_attention(block.attn2, where + ".attn2", cross=True)


def _timesteps(timesteps, lengths: List[int], device):
    """-> (timesteps [n] or [N] in the pack's row order, per_token)."""
    n = len(lengths)
    if isinstance(timesteps, torch.Tensor):
        if timesteps.dim() != 1 or timesteps.numel() != n:
            raise ValueError(f"packed_forward: timesteps as a tensor must be [{n}] (one per sample), got "
                             f"{tuple(timesteps.shape)}; per-token timesteps are a list of n tensors [F'*H'*W']")
        return timesteps.to(device), False
    items = [torch.as_tensor(t, device=device).flatten() for t in timesteps]
    if len(items) != n:
        raise ValueError(f"packed_forward: {len(items)} timesteps for {n} samples (one entry per sample)")
    for i, (t, length) in enumerate(zip(items, lengths)):
        if t.numel() not in (1, length):
            raise ValueError(f"packed_forward: timesteps[{i}] has {t.numel()} values; sample {i} has {length} "
                             "tokens (give 1 value per sample or one per token)")
    if all(t.numel() == 1 for t in items):
        return torch.cat(items), False
    return torch.cat([t.expand(length) for t, length in zip(items, lengths)]), True


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, eps: float, seg: Segments):
    # x [N, D]; shift, scale fp32 [n, D] (a row a sample: the segment-indexed kernel) or [N, D]
    if seg.per_token:
        return fused_adaln(x, shift, scale, eps=eps)
    return fused_adaln(x, shift, scale, eps=eps, cu_seqlens=seg.cu)


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # WanAttnProcessor's apply_rotary_emb: x [N, H, d], cos / sin [N, 1, d] fp32, pairs interleaved
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    cos, sin = cos[..., 0::2], sin[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2).type_as(x)


def _attention(attn, x: torch.Tensor, context, rope, seg: Segments) -> torch.Tensor:
    """WanAttnProcessor.__call__ on packed rows x [N, D]: self-attention (context None, rope
    (cos, sin)) or cross-attention to the packed texts context [T, D]."""
    q, k, v = transformer_wan._get_qkv_projections(attn, x, context)
    q, k = attn.norm_q(q), attn.norm_k(k)
    q, k, v = (t.unflatten(1, (attn.heads, -1)) for t in (q, k, v))  # [rows, H, d]
    if rope is not None:
        q, k = _rotary(q, *rope), _rotary(k, *rope)
    cu_k = seg.cu if context is None else seg.cu_text
    out = varlen_attention(q, k, v, seg.cu, cu_k).flatten(1, 2).type_as(q)
    return attn.to_out[1](attn.to_out[0](out))


def _block(block, x, context, e, cos, sin, *, seg: Segments):
    """WanTransformerBlock.forward on packed rows: x [N, D], context [T, D], e [n or N, 6, D]."""
    shift, scale, gate, c_shift, c_scale, c_gate = (block.scale_shift_table + e.float()).unbind(1)  # fp32
    y = _attention(block.attn1, _modulate(x, shift, scale, block.norm1.eps, seg), None, (cos, sin), seg)
    x = (x.float() + y * seg.rows(gate)).type_as(x)
    if isinstance(block.norm2, nn.Identity):
        h = x
    else:  # the affine cross-attention norm: fused_adaln without modulation
        zero = x.new_zeros((1, x.shape[1]), dtype=torch.float32)
        h = fused_adaln(x, zero, zero, block.norm2.weight, block.norm2.bias, eps=block.norm2.eps)
    x = x + _attention(block.attn2, h, context, None, seg)
    y = block.ffn(_modulate(x, c_shift, c_scale, block.norm3.eps, seg))
    return (x.float() + y.float() * seg.rows(c_gate)).type_as(x)


class _BlockCall:
    """_block on one block and the pack's Segments, as a callable object: diffusers' checkpointing
    function calls fn.__call__, which Dynamo traces on an object but not on a functools.partial
    or a closure (a graph break there would leave the checkpointed blocks eager)."""

    def __init__(self, block, seg: Segments):
        self.block, self.seg = block, seg

    def __call__(self, x, context, e, cos, sin):
        return _block(self.block, x, context, e, cos, sin, seg=self.seg)


def _check_inputs(model, latents: list, texts: list) -> None:
    c = model.config
    if not latents:
        raise ValueError("packed_forward: no samples (a pack holds at least one)")
    if len(texts) != len(latents):
        raise ValueError(f"packed_forward: {len(texts)} texts for {len(latents)} latents (one per sample)")
    for i, x in enumerate(latents):
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.shape[0] != c.in_channels:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"packed_forward: latents[{i}] must be [{c.in_channels}, F, H, W] (the model's "
                             f"in_channels), got {shape}")
    for i, e in enumerate(texts):
        if not isinstance(e, torch.Tensor) or e.dim() != 2 or e.shape[1] != c.text_dim or e.shape[0] < 1:
            shape = tuple(e.shape) if isinstance(e, torch.Tensor) else type(e).__name__
            raise ValueError(f"packed_forward: encoder_hidden_states[{i}] must be [L, {c.text_dim}] with L >= 1 "
                             f"(the model's text_dim), got {shape}")


@torch.compiler.disable  # host-side: offsets, grids and counts (pack), before the traced layers
def _prepare(model, latents: list, timesteps, texts: list):
    """-> (PackedBatch, its Segments)."""
    _check_inputs(model, latents, texts)
    patch = tuple(model.config.patch_size)
    lengths = [(x.shape[1] // patch[0]) * (x.shape[2] // patch[1]) * (x.shape[3] // patch[2]) for x in latents]
    t, per_token = _timesteps(timesteps, lengths, latents[0].device)
    packed = pack(latents, patch, timesteps=t, text=texts)
    for i, grid in enumerate(packed.grids):
        if max(grid) > model.rope.max_seq_len:
            raise ValueError(f"packed_forward: latents[{i}] is {grid} patches (frames, height, width); the model's "
                             f"RoPE tables hold {model.rope.max_seq_len} positions an axis (rope_max_seq_len)")
    return packed, Segments(packed, per_token)


def packed_forward(model, latents: Sequence[torch.Tensor], timesteps, encoder_hidden_states: Sequence[torch.Tensor]
                   ) -> List[torch.Tensor]:
    """diffusers' WanTransformer3DModel on a pack of samples of different shapes (see the module
    docstring): latents per sample [C, F, H, W] (F, H, W multiples of the patch), timesteps [n]
    per sample or a list of per-sample [F'*H'*W'] per-token ones, encoder_hidden_states per
    sample [L_i, text_dim] -> per-sample predictions [C_out, F, H, W]. Raises
    UnrecognisedWanModelError / UnsupportedWanModelError for a model it does not know or
    support, ValueError for inputs that do not fit the model."""
    _check(model)
    latents = list(latents)
    packed, seg = _prepare(model, latents, timesteps, list(encoder_hidden_states))
    out, c_out = _layers(model, packed, seg)
    return _unpack(out, packed, c_out)


def _rope(rope, positions: torch.Tensor):
    """WanRotaryPosEmbed.forward for every sample of the pack at once: its freqs_cos / freqs_sin
    tables [max_seq_len, d] split into the time, height and width parts as its forward splits
    them, each part's row taken at the token's frame, row or column (positions [N, 3]); the
    same values as model.rope(latent[None]) for each sample alone (indexing, no arithmetic),
    with no per-sample shape in the traced graph -> (cos, sin) [N, 1, d]."""
    split = [rope.t_dim, rope.h_dim, rope.w_dim]
    out = []
    for table in (rope.freqs_cos, rope.freqs_sin):
        parts = table.split(split, dim=1)
        out.append(torch.cat([part[positions[:, axis]] for axis, part in enumerate(parts)], -1)[:, None])
    return out


def _layers(model, packed, seg: Segments):
    """The model's layers on the pack, between _prepare and _unpack: what torch.compile traces,
    one graph with no break (fullgraph=True, python/tests/test_diffusers_packed.py); it reads
    the pack's tensors and sizes only, not its per-sample lists, so packs of other layouts
    reuse the graph after one recompile -> (the pack's rows [N, C_out*pt*ph*pw] in unpack's
    feature order, C_out)."""
    conv = model.patch_embedding
    x = F.linear(packed.tokens, conv.weight.flatten(1), conv.bias)  # [N, D]; features (C, pt, ph, pw)
    cos, sin = _rope(model.rope, packed.positions)  # [N, 1, d] each
    temb, proj, context, _ = model.condition_embedder(packed.timesteps, packed.text, None)
    e = proj.unflatten(1, (6, -1))  # [n or N, 6, D]; temb [n or N, D]; context [T, D]

    checkpointing = torch.is_grad_enabled() and model.gradient_checkpointing
    for block in model.blocks:
        fn = _BlockCall(block, seg)
        x = model._gradient_checkpointing_func(fn, x, context, e, cos, sin) if checkpointing else \
            fn(x, context, e, cos, sin)

    shift, scale = _wan._fp32_modulation(*(model.scale_shift_table + temb.unsqueeze(1)).unbind(1))
    out = model.proj_out(_modulate(x, shift, scale, model.norm_out.eps, seg))  # [N, pt*ph*pw*C_out]
    p = math.prod(packed.patch)
    c_out = out.shape[1] // p
    return out.unflatten(1, (p, c_out)).transpose(1, 2).flatten(1), c_out  # features (C_out, pt, ph, pw)


@torch.compiler.disable  # per-sample slices at host offsets
def _unpack(out: torch.Tensor, packed, c_out: int) -> List[torch.Tensor]:
    return unpack(out, dataclasses.replace(packed, shapes=[(c_out, *s[1:]) for s in packed.shapes]))
