"""train_dit.py's real data paths: the micro-batches this process trains, in the order it
trains them, read by a DataLoader with --num-workers workers, and turned into the loop's inputs.

  --data cache: latents and text embeddings from a latent cache (adaptiveload.cache.CacheDataset).
  --data media: samples decoded at their planned buckets in the workers
      (adaptiveload.media.MediaDataset), encoded by a VAE in the loop (--vae, or a tiny randomly
      initialised AutoencoderKLWan); the text embeddings are drawn per sample (no text encoder
      runs in the loop: python -m adaptiveload.cache is the path with one).

Each sample's timestep and noise (and, for media, its text) are drawn from its own generator
(seed, epoch, row), as train_dit's per-sample random inputs are, so a sample trains on the same
tensors however the step is split over ranks or packed. Every take() is timed: the seconds the
trainer waited for the loader (LoaderFeed.wait_s, per emulated rank), which train_dit reports.
"""
import os
import sys
import time
from typing import Dict, Iterator, List, Optional

import torch

from ..cache import CacheDataset, load_vae, vae_encoder
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


def check_feed_args(args, interleave_ranks: bool) -> None:
    """--data cache / media read ahead in the loop's order: options that change the order as it
    runs are refused."""
    subset = "(the cache folder is the manifest)" if args.data == "cache" else "(give the manifest of the subset)"
    for bad, why in ((args.adapt_every is not None, "--adapt-every (a re-plan changes the order)"),
                     (args.spread, "--spread"), (interleave_ranks, "--rank-order interleaved"),
                     (args.subset is not None, f"--subset {subset}"),
                     (args.interleave, "--interleave")):
        if bad:
            sys.exit(f"train_dit.py: --data {args.data} does not combine with {why}")
    if args.data == "media" and args.vae is not None and not os.path.isdir(args.vae):
        sys.exit(f"train_dit.py: --vae {args.vae!r} is no folder (a local diffusers from_pretrained folder)")


class LoaderFeed:
    """A DataLoader over `dataset` in a given micro-batch order; take() checks each batch is the
    micro-batch the loop asks for (a loader out of step with the plan is an error, never a
    silently different sample) and times how long the trainer waited for it."""

    def __init__(self, dataset, order: List[List[int]], num_workers: int, what: str):
        self.dataset, self.what = dataset, what
        extra = dict(persistent_workers=False, prefetch_factor=2) if num_workers > 0 else {}
        self.loader = torch.utils.data.DataLoader(self.dataset, batch_sampler=order, num_workers=num_workers,
                                                  collate_fn=list, pin_memory=torch.cuda.is_available(), **extra)
        self.it: Iterator = iter(self.loader)
        self.loaded: List[int] = []  # rows read, in order
        self.wait_s: Dict[int, float] = {}  # seconds blocked in take() while counting, by the rank that asked
        self.counting = True  # train_dit counts the measured steps' waits only

    def take(self, rows: List[int], rank: int = 0) -> list:
        t0 = time.perf_counter()
        batch = next(self.it)
        if self.counting:
            self.wait_s[rank] = self.wait_s.get(rank, 0.0) + time.perf_counter() - t0
        got = [s["row"] for s in batch]
        if got != list(rows):
            raise RuntimeError(f"train_dit.py: the {self.what} loader gave rows {got}, the loop trains {list(rows)}")
        bad = [(s["row"], s.get("error") or s.get("bad")) for s in batch if s.get("pixels", 0) is None or "bad" in s]
        if bad:  # on_bad="error" raises in the worker; kept as a guard: never a silently shorter batch
            raise RuntimeError(f"train_dit.py: the {self.what} loader could not load rows {bad}")
        self.loaded += got
        return batch


def cache_feed(cache_dir: str, sampler, order: List[List[int]], num_workers: int) -> LoaderFeed:
    """The cache's rows by the loop's order (CacheDataset)."""
    return LoaderFeed(CacheDataset(cache_dir, sampler), order, num_workers, "cache")


def media_feed(sampler, order: List[List[int]], num_workers: int, root: Optional[str]) -> LoaderFeed:
    """Media decoded at their buckets by the loop's order (MediaDataset; the window of the
    sampler's epoch: train_dit runs one). Workers are forked (MediaDataset does not pickle)."""
    from adaptiveload.media import MediaDataset

    data = MediaDataset(sampler, root=root, epoch=sampler.epoch)
    return LoaderFeed(data, order, num_workers, "media")


def tiny_vae():
    """A randomly initialised AutoencoderKLWan with Wan's latent channels (16) and strides
    (4x8x8), small widths (the cache tests' config); fixed seed, so every rank builds the same."""
    from diffusers import AutoencoderKLWan

    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    vae = AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True])
    torch.random.set_rng_state(state)
    return vae.eval()


def media_encoder(vae_path: Optional[str], device, vae_class: str = "AutoencoderKLWan"):
    """pixels [3, F, H, W] -> latent [C, f, h, w]: the VAE at vae_path (fp32), or tiny_vae()."""
    vae = load_vae(vae_path, device, torch.float32, vae_class) if vae_path else tiny_vae().to(device)
    return vae_encoder(vae, device, torch.float32)


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


def _stacked(drawn: list, device, dtype, packed: bool) -> tuple:
    if packed:
        x0s, ctxs, ts, noises = ([v.to(device=device, dtype=dtype) for v in vs] for vs in zip(*drawn))
        return x0s, ctxs, torch.stack(ts).to(torch.float32), noises
    return tuple(torch.stack(v).to(device=device, dtype=dtype if k != 2 else torch.float32)
                 for k, v in enumerate(zip(*drawn)))


def media_inputs(batch: list, encode, sampler, c, seed: int, epoch: int, device, dtype, packed: bool) -> tuple:
    """(x0, text, t, noise) of decoded samples: each sample's pixels through the VAE, the latent
    checked against the planner's shape for its bucket (sampler.latent_shape); text, t and noise
    from the sample's generator."""
    drawn = []
    for s in batch:
        latent = encode(s["pixels"])
        want = tuple(sampler.latent_shape(s["row"]))
        if tuple(latent.shape) != want:
            raise ValueError(f"train_dit.py: row {s['row']}: the VAE gave a latent {tuple(latent.shape)} for bucket "
                             f"{tuple(s['shape'])}, the planner expects {want}: use the VAE of the model planned for")
        g = sample_generator(seed, epoch, s["row"])
        t = torch.rand((), generator=g)
        noise = torch.randn(latent.shape, generator=g)
        drawn.append((latent, torch.randn((c.text_len, c.text_dim), generator=g), t, noise))
    return _stacked(drawn, device, dtype, packed)


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
    return _stacked(drawn, device, dtype, packed)


def loader_waits(feed, times: List[List[float]], world: int, ddp: bool) -> dict:
    """The seconds each rank's trainer waited for the loader (--data cache / media) in the
    measured steps, and that wait as a share of the rank's timed compute plus the wait; under
    torchrun gathered from every rank (a collective: every rank calls it)."""
    waits = [feed.wait_s.get(r, 0.0) for r in range(world)]
    if ddp:
        gathered = [None] * world
        torch.distributed.all_gather_object(gathered, feed.wait_s.get(torch.distributed.get_rank(), 0.0))
        waits = [float(w) for w in gathered]
    compute = [sum(T[r] for T in times) for r in range(world)]
    share = [w / (w + c) if w + c > 0 else 0.0 for w, c in zip(waits, compute)]
    return {"data_wait_s": waits, "data_wait_share": share, "loader_workers": feed.loader.num_workers}
