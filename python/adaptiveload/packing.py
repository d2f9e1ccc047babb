"""Packed micro-batches: samples of different shapes (images and clips of any length and aspect
ratio) as one token sequence with segment offsets, and back.

    packed = pack(latents, patch=(1, 2, 2), timesteps=t, text=texts)
    # latents: per sample [C, F, H, W] (F, H, W multiples of the patch); texts: per sample [L_i, D]
    packed.tokens          # [N, C*pt*ph*pw]: every sample's patches, concatenated, no padding
    packed.cu_seqlens      # [n + 1] int32: sample i is rows cu_seqlens[i]:cu_seqlens[i+1]
    packed.grids           # per sample (F/pt, H/ph, W/pw): 3D RoPE positions and unpatchify
    packed.positions       # [N, 3] int64: each row's (frame, row, column) in its sample's grid
    packed.timesteps       # [n], one per sample (or [N], one per token row, Wan 2.2 style: given
                           # flat, or per sample as each sample's [F'*H'*W'] tensor)
    packed.text, packed.cu_seqlens_text   # the texts concatenated, and their offsets
    outputs = unpack(pred_tokens, packed)  # per sample [C, F, H, W] again, for the loss

The token order and the features of a sample are patchify's (patches.py, as the models'), so a packed
sample's rows are exactly that sample's patchify rows. `collate_packed` is a DataLoader
collate function over samples given as dicts {"latent", "timestep", "text"}. Attention over a
pack is varlen_attention(q, k, v, packed.cu_seqlens, packed.cu_seqlens) (attention.py);
cross-attention to the texts uses packed.cu_seqlens_text as the key offsets.
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .ops import fused_adaln
from .patches import grid_positions, patchify, unpatchify

__all__ = ["PackedBatch", "Segments", "pack", "unpack", "collate_packed"]


@dataclass
class PackedBatch:
    tokens: torch.Tensor  # [N, C*pt*ph*pw]
    cu_seqlens: torch.Tensor  # [n + 1] int32
    grids: List[Tuple[int, int, int]]  # per sample, patches along (frames, height, width)
    shapes: List[Tuple[int, int, int, int]]  # per sample (C, F, H, W)
    patch: Tuple[int, int, int]
    timesteps: Optional[torch.Tensor] = None  # [n] per sample, or [N] per token
    text: Optional[torch.Tensor] = None  # [T, D_text]
    cu_seqlens_text: Optional[torch.Tensor] = None  # [n + 1] int32
    # [N, 3] int64, each row's (frame, row, column) in its sample's grid: the 3D RoPE positions
    # as a tensor, so a compiled forward does not specialise on the grids (None: from grids).
    positions: Optional[torch.Tensor] = None

    @property
    def num_samples(self) -> int:
        return len(self.shapes)

    @property
    def max_seqlen(self) -> int:
        return max((f * h * w for f, h, w in self.grids), default=0)

    @property
    def max_seqlen_text(self) -> int:
        if self.cu_seqlens_text is None:
            return 0
        return int((self.cu_seqlens_text[1:] - self.cu_seqlens_text[:-1]).max()) if self.num_samples else 0

    def pin_memory(self, device=None) -> "PackedBatch":
        """The batch with its tensors in page-locked memory, for DataLoader(pin_memory=True) (its
        pin-memory thread calls this on a batch of a custom type). Without an accelerator pinning
        is impossible and the batch is returned as it is (the DataLoader itself warns and skips
        pinning then); `device` is torch's pin_memory argument, accepted for older callers."""
        accel = getattr(torch, "accelerator", None)
        if not (accel.is_available() if accel is not None else torch.cuda.is_available()):
            return self
        fields = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return PackedBatch(**{k: v.pin_memory() if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v
                              for k, v in fields.items()})

    def token_positions(self) -> torch.Tensor:
        """`positions`, or computed from the grids when the pack has none: [N, 3] int64."""
        if self.positions is not None:
            return self.positions
        return torch.cat([grid_positions(g, self.tokens.device) for g in self.grids])

    def segment_ids(self) -> torch.Tensor:
        """Per token row, its sample: [N] int64 (for per-sample modulation gathered per token)."""
        lengths = self.cu_seqlens[1:] - self.cu_seqlens[:-1]
        return torch.repeat_interleave(torch.arange(self.num_samples, device=self.tokens.device),
                                       lengths.to(self.tokens.device).long())


def _offsets(lengths: Sequence[int], device) -> torch.Tensor:
    out = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    if lengths:
        out[1:] = torch.tensor(list(lengths), dtype=torch.int64).cumsum(0).to(torch.int32)
    return out.to(device)


def _timesteps(timesteps, lengths: List[int], device) -> torch.Tensor:
    """pack's timesteps -> [n] (one per sample) or [N] (one per token, in the pack's row order).
    Given as one tensor or flat sequence of n or N numbers, or as one entry per sample: a number
    or a tensor of one value, or of that sample's token count (per-token timesteps, the form
    packed_forward takes). Raises ValueError naming the sample whose entry does not fit."""
    n, N = len(lengths), sum(lengths)
    per_sample = isinstance(timesteps, (list, tuple)) and len(timesteps) == n and \
        any(isinstance(t, torch.Tensor) for t in timesteps)
    if not per_sample:
        try:
            t = torch.as_tensor(timesteps, device=device).flatten()
        except (TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"pack: timesteps must be {n} numbers (one per sample), {N} (one per token) or one "
                             f"entry per sample; got {type(timesteps).__name__} ({e})") from None
        if t.numel() not in (n, N):
            raise ValueError(f"pack: {t.numel()} timesteps for {n} samples of {N} tokens (one per sample, or one "
                             "per token in the pack's row order)")
        return t
    items = []
    for i, (x, length) in enumerate(zip(timesteps, lengths)):
        try:
            t = torch.as_tensor(x, device=device).flatten()
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"pack: timesteps[{i}] (sample {i}) must be a number or a tensor, got "
                             f"{type(x).__name__}") from None
        if t.numel() not in (1, length):
            raise ValueError(f"pack: timesteps[{i}] has {t.numel()} values; sample {i} has {length} tokens (give "
                             "one value per sample, or one per token of the sample)")
        items.append(t)
    if all(t.numel() == 1 for t in items):
        return torch.cat(items)
    return torch.cat([t.expand(length) for t, length in zip(items, lengths)])


def pack(latents: Sequence[torch.Tensor], patch=(1, 2, 2), timesteps=None,
         text: Optional[Sequence[torch.Tensor]] = None) -> PackedBatch:
    """Packs per-sample latents [C, F, H, W] (one channel count, dtype and device; F, H, W
    multiples of `patch`), their timesteps (n numbers or a [n] tensor, N per token in the
    pack's row order, or one entry per sample: a number or that sample's per-token tensor) and
    texts ([L_i, D], one D) into one PackedBatch. Raises ValueError naming the sample that does not fit."""
    patch = tuple(int(p) for p in patch)
    if len(patch) != 3 or min(patch) < 1:
        raise ValueError(f"pack: patch must be three positive sizes (pt, ph, pw), got {patch}")
    latents = list(latents)
    if not latents:
        raise ValueError("pack: no samples (a pack holds at least one)")
    first = latents[0]
    grids, shapes, rows = [], [], []
    for i, x in enumerate(latents):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"pack: sample {i} must be a latent [C, F, H, W], got {shape}")
        if x.shape[0] != first.shape[0] or x.dtype != first.dtype or x.device != first.device:
            raise ValueError(f"pack: sample {i} is {x.shape[0]} channels {x.dtype} on {x.device}, sample 0 "
                             f"{first.shape[0]} channels {first.dtype} on {first.device}; a pack holds one of each")
        C, F, H, W = x.shape
        if F % patch[0] or H % patch[1] or W % patch[2]:
            raise ValueError(f"pack: sample {i} of shape {tuple(x.shape)} is not a whole number of patches "
                             f"{patch} (frames, height, width)")
        grids.append((F // patch[0], H // patch[1], W // patch[2]))
        shapes.append((C, F, H, W))
        rows.append(patchify(x.unsqueeze(0), patch)[0])
    n = len(latents)
    out = PackedBatch(tokens=torch.cat(rows, 0), cu_seqlens=_offsets([r.shape[0] for r in rows], first.device),
                      grids=grids, shapes=shapes, patch=patch)
    out.positions = out.token_positions()
    if timesteps is not None:
        out.timesteps = _timesteps(timesteps, [r.shape[0] for r in rows], first.device)
    if text is not None:
        text = list(text)
        if len(text) != n:
            raise ValueError(f"pack: {len(text)} texts for {n} samples (one per sample)")
        for i, e in enumerate(text):
            if not isinstance(e, torch.Tensor) or e.dim() != 2 or e.shape[1] != text[0].shape[1]:
                shape = tuple(e.shape) if isinstance(e, torch.Tensor) else type(e).__name__
                raise ValueError(f"pack: text {i} must be [L, D] with sample 0's D ({tuple(text[0].shape)[1:]}), "
                                 f"got {shape}")
        out.text = torch.cat(text, 0)
        out.cu_seqlens_text = _offsets([e.shape[0] for e in text], first.device)
    return out


def unpack(tokens: torch.Tensor, packed: PackedBatch) -> List[torch.Tensor]:
    """Per-sample outputs [C, F, H, W] from packed rows [N, C*pt*ph*pw] in `packed`'s order
    (a model's patch predictions); the inverse of pack's patchify."""
    N = int(packed.cu_seqlens[-1])
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"unpack: tokens must be a tensor [{N}, features], got {type(tokens).__name__}")
    if tokens.dim() != 2 or tokens.shape[0] != N:
        raise ValueError(f"unpack: tokens must be [{N}, features] (the pack's rows), got {tuple(tokens.shape)}")
    pt, ph, pw = packed.patch
    C = packed.shapes[0][0] if packed.shapes else 0
    if packed.shapes and tokens.shape[1] != C * pt * ph * pw:
        raise ValueError(f"unpack: tokens has {tokens.shape[1]} features a row; the pack's samples need "
                         f"{C * pt * ph * pw} (C = {C} channels x patch {packed.patch}): shape {tuple(tokens.shape)}, "
                         f"expected [{N}, {C * pt * ph * pw}]")
    out = []
    for i, shape in enumerate(packed.shapes):
        a, b = int(packed.cu_seqlens[i]), int(packed.cu_seqlens[i + 1])
        out.append(unpatchify(tokens[a:b].unsqueeze(0), packed.patch, shape)[0])
    return out


def collate_packed(samples, patch=(1, 2, 2)) -> PackedBatch:
    """DataLoader collate function: samples as dicts with "latent" [C, F, H, W] and optional
    "timestep" (a number, or the sample's per-token timesteps [F'*H'*W']) and "text" [L, D] (all
    of them or none of them) -> one PackedBatch."""
    samples = list(samples)
    for key in ("timestep", "text"):
        have = [key in s for s in samples]
        if any(have) and not all(have):
            raise ValueError(f"collate_packed: sample {have.index(False)} has no '{key}' but others do")
    t = [s["timestep"] for s in samples] if samples and "timestep" in samples[0] else None
    text = [s["text"] for s in samples] if samples and "text" in samples[0] else None
    return pack([s["latent"] for s in samples], patch, timesteps=t, text=text)


class Segments:
    """A pack's segment layout, computed once per forward: token offsets `cu` [n + 1] and their
    lengths, the text offsets, and whether the modulation is per sample ([n, ...]) or per
    token ([N, ...]). Only tensors and their sizes: nothing of the pack's Python lists (grids,
    shapes), which torch.compile would specialise the graph on; so no max_seqlen either:
    varlen_attention computes it where a backend needs it (flash, from the host copy of the
    offsets it checks anyway)."""

    def __init__(self, packed, per_token: bool):
        self.cu = packed.cu_seqlens
        self.cu_text = packed.cu_seqlens_text
        self.n = packed.cu_seqlens.shape[0] - 1
        self.total = packed.tokens.shape[0]  # N: cu_seqlens ends there (varlen_attention checks it)
        self.lengths = (self.cu[1:] - self.cu[:-1]).long().to(packed.tokens.device)  # [n]
        self.per_token = per_token

    def rows(self, m: torch.Tensor) -> torch.Tensor:
        """Modulation [n, D] per sample (or [N, D] per token) -> [N, D] per token row."""
        return m if self.per_token else torch.repeat_interleave(m, self.lengths, dim=0, output_size=self.total)

    def modulate(self, x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, eps: float,
                 fused: bool) -> torch.Tensor:
        """The packed adaLN site: LayerNorm(x) * (1 + scale) + shift with x [N, D] and each
        sample's shift / scale [n, D] fp32 on its rows (or per token [N, D])."""
        if fused:
            # The kernel reads each sample's row where its segment is: no [N, D] copies.
            return fused_adaln(x, shift, scale, eps=eps, cu_seqlens=None if self.per_token else self.cu)
        shift, scale = self.rows(shift), self.rows(scale)
        y = F.layer_norm(x.float(), (x.shape[-1],), eps=eps)  # as Block.modulate: fp32 norm and modulation
        return (y * (1 + scale) + shift).type_as(x)
