"""train_dit.py's real data path (--data cache): the micro-batches this process trains, in the
order it trains them, read from a latent cache by a DataLoader with --num-workers workers
(adaptiveload.cache.CacheDataset), and turned into the loop's inputs.

The latents and text embeddings are the cache's; each sample's timestep and noise are drawn
from its own generator (seed, epoch, row), as train_dit's per-sample random inputs are, so a
sample trains on the same tensors however the step is split over ranks or packed.
"""
import sys
from typing import Iterator, List

import torch

from ..cache import CacheDataset
from .inputs import sample_generator


def feed_order(samplers, args, total_steps: int) -> List[List[int]]:
    """The micro-batches train_dit's loop trains, in its order (steps in turn, each process's
    ranks one after the other): warm-up steps, then the measured ones, read with schedule(),
    which does not move the samplers."""
    def steps(n):
        its = [s.schedule() for s in samplers]
        out = []
        for _ in range(n):
            try:
                out.append([next(it) for it in its])
            except StopIteration:
                break
        return out

    order = []
    chosen = steps(min(args.warmup, total_steps)) + steps(2**62) if args.epoch else steps(args.warmup + args.steps)
    for step in chosen:
        seen = set()  # emulated ranks: a sequence-parallel group's micro-batch runs once, at its first visit
        for st in step:
            for i, mb in enumerate(st.micro_batches):
                ranks = tuple(st.groups[i]) if st.groups else ()
                if len(samplers) > 1 and len(ranks) > 1:
                    if (ranks, tuple(mb)) in seen:
                        continue
                    seen.add((ranks, tuple(mb)))
                order.append(list(mb))
    return order


def check_cache_args(args, interleave_ranks: bool) -> None:
    """--data cache reads ahead in the loop's order: options that change the order as it runs
    are refused."""
    for bad, why in ((args.adapt_every is not None, "--adapt-every (a re-plan changes the order)"),
                     (args.spread, "--spread"), (interleave_ranks, "--rank-order interleaved"),
                     (args.subset is not None, "--subset (the cache folder is the manifest)"),
                     (args.interleave, "--interleave")):
        if bad:
            sys.exit(f"train_dit.py: --data cache does not combine with {why}")


class CacheFeed:
    """A DataLoader over a cache in a given micro-batch order; take() checks each batch is the
    micro-batch the loop asks for (a loader out of step with the plan is an error, never a
    silently different sample)."""

    def __init__(self, cache_dir: str, sampler, order: List[List[int]], num_workers: int):
        self.dataset = CacheDataset(cache_dir, sampler)
        extra = dict(persistent_workers=False, prefetch_factor=2) if num_workers > 0 else {}
        self.loader = torch.utils.data.DataLoader(self.dataset, batch_sampler=order, num_workers=num_workers,
                                                  collate_fn=list, pin_memory=torch.cuda.is_available(), **extra)
        self.it: Iterator = iter(self.loader)
        self.loaded: List[int] = []  # rows read, in order

    def take(self, rows: List[int]) -> list:
        batch = next(self.it)
        got = [s["row"] for s in batch]
        if got != list(rows):
            raise RuntimeError(f"train_dit.py: the cache loader gave rows {got}, the loop trains {list(rows)}")
        self.loaded += got
        return batch


def _text(t: torch.Tensor, text_len: int) -> torch.Tensor:
    """A cached caption [L, D] as the model's text input [text_len, D]: zero-padded or cut."""
    out = torch.zeros(text_len, t.shape[1], dtype=t.dtype)
    n = min(text_len, t.shape[0])
    out[:n] = t[:n]
    return out


def _noise(row: int, shape, seed: int, epoch: int):
    g = sample_generator(seed, epoch, row)  # the random inputs' generator of the sample: the same draws
    t = torch.rand((), generator=g)
    return t, torch.randn(shape, generator=g)


def cache_inputs(batch: list, c, seed: int, epoch: int, device, dtype, packed: bool) -> tuple:
    """(x0, text, t, noise): stacked [B, ...] for a micro-batch of one shape, or per-sample lists
    (t stacked [n]) for a pack, as train_dit's sample_inputs / pack_inputs give them."""
    drawn = []
    for s in batch:
        if tuple(s["text"].shape[1:]) != (c.text_dim,):
            raise ValueError(f"train_dit.py: cache row {s['row']}: text embeddings of dim {s['text'].shape[1]}, the "
                             f"model's text_dim is {c.text_dim} (a cache made with another text encoder)")
        t, noise = _noise(s["row"], s["latent"].shape, seed, epoch)
        drawn.append((s["latent"], _text(s["text"], c.text_len), t, noise))
    if packed:
        x0s, ctxs, ts, noises = ([v.to(device=device, dtype=dtype) for v in vs] for vs in zip(*drawn))
        return x0s, ctxs, torch.stack(ts).to(torch.float32), noises
    return tuple(torch.stack(v).to(device=device, dtype=dtype if k != 2 else torch.float32)
                 for k, v in enumerate(zip(*drawn)))
