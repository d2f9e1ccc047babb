"""A micro-batch's random inputs at its planned buckets (the harness's data when it trains on
random latents): a stream drawn in turn, or per sample, a pure function of (seed, epoch, sample
id), so a sample trains on the same tensors however a step is split over ranks or packed."""
from typing import List, Optional

import torch

from ..models import wan_dit


def make_batch(sampler, rows: List[int], c: wan_dit.WanDiTConfig, device, dtype, gen: torch.Generator):
    """Random latents [B, 16, f, H/8, W/8] for the rows' bucket, and random text tokens."""
    frames, height, width = sampler.sample_geometry(rows[0])
    f = 1 + (frames - 1) // 4
    shape = (len(rows), c.in_channels, f, height // 8, width // 8)
    x0 = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    ctx = torch.randn((len(rows), c.text_len, c.text_dim), generator=gen).to(device=device, dtype=dtype)
    return x0, ctx


def latent_shape(sampler, row: int, c: wan_dit.WanDiTConfig) -> tuple:
    """A row's latent shape [16, f, H/8, W/8] at its bucket (Wan's VAE: f = 1 + (frames - 1) / 4)."""
    frames, height, width = sampler.sample_geometry(row)
    return (c.in_channels, 1 + (frames - 1) // 4, height // 8, width // 8)


def sample_input(shape: tuple, c: wan_dit.WanDiTConfig, g: torch.Generator) -> tuple:
    """One sample's inputs drawn from g, on the CPU: latent x0 `shape`, text [text_len, text_dim],
    timestep t [] in [0, 1), noise like x0."""
    x0 = torch.randn(shape, generator=g)
    ctx = torch.randn((c.text_len, c.text_dim), generator=g)
    t = torch.rand((), generator=g)
    return x0, ctx, t, torch.randn(shape, generator=g)


def sample_generator(seed: int, epoch: int, row: int) -> torch.Generator:
    """The generator of a sample's per-sample inputs: a pure function of (seed, epoch, sample id)."""
    return torch.Generator().manual_seed((seed * 2**40 + epoch * 2**32 + int(row)) % 2**63)


def sample_inputs(sampler, rows: List[int], c: wan_dit.WanDiTConfig, seed: int, epoch: int, device, dtype):
    """Inputs that are a pure function of (seed, epoch, sample id): latents x0 [B, 16, f, H/8, W/8],
    text [B, text_len, text_dim], timestep t [B] in [0, 1), noise like x0. However a step's
    samples are split over ranks (or packed), each sample trains on the same tensors."""
    shape = latent_shape(sampler, rows[0], c)
    drawn = [sample_input(shape, c, sample_generator(seed, epoch, i)) for i in rows]
    return tuple(torch.stack(v).to(device=device, dtype=dtype if k != 2 else torch.float32)
                 for k, v in enumerate(zip(*drawn)))


def pack_inputs(sampler, rows: List[int], c: wan_dit.WanDiTConfig, device, dtype, seed: int, epoch: int,
                gen: Optional[torch.Generator]) -> tuple:
    """A pack's inputs, per sample in the micro-batch's order: lists of x0 [16, f_i, H_i/8, W_i/8]
    at each row's own bucket, text [text_len, text_dim], noise like x0, and t [n] fp32. gen None:
    per-sample inputs (sample_inputs' tensors, sample for sample); else drawn from gen in turn."""
    drawn = [sample_input(latent_shape(sampler, i, c), c, gen if gen is not None else sample_generator(seed, epoch, i))
             for i in rows]
    x0s, ctxs, ts, noises = ([v.to(device=device, dtype=dtype) for v in vs] for vs in zip(*drawn))
    return x0s, ctxs, torch.stack(ts).to(torch.float32), noises
