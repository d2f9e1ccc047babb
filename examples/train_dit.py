#!/usr/bin/env python3
"""Train a Wan-2.1-style DiT on random latents shaped by a real manifest, with batches from
AdaptiveBatchSampler, and measure what DESIGN.md's metrics say: imbalance, throughput, peak
memory — beside the planner's prediction for the same steps.

Models (--model): wan-dit, our own (adaptiveload.models.wan_dit); diffusers-wan, diffusers'
WanTransformer3DModel built from the same dimensions with random weights (--config
wan2.1-1.3b is Wan 2.1 T2V 1.3B's config), its adaLN fused by adaptiveload.diffusers.

Two modes:
  emulated ranks (default): one process, one device; each global step runs every emulated
      rank's micro-batches in turn, timing each rank (CUDA events on GPU, wall clock on CPU);
      the step time is the slowest rank's, as in synchronous data parallelism. --rank-order
      sequential (default) runs them rank by rank; interleaved spreads each rank's over the
      step, so a drift of the machine's speed within a step falls on every rank alike.
  real data parallel: under torchrun (WORLD_SIZE set); NCCL on GPU, gloo on CPU. Each rank
      runs its micro-batches without synchronising gradients, then one explicit all-reduce
      per step; per-rank compute times are all-gathered.
  --parallel ddp / fsdp2 (under torchrun): the model wrapped as training jobs wrap it.
      ddp: DistributedDataParallel, no_sync() on all but the last micro-batch of a step (one
      all-reduce per step; ranks may run different numbers of micro-batches: the sampler's
      `step` sync mode). fsdp2: torch.distributed.fsdp.fully_shard on every block and on the
      root (FSDP2; works on CPU with gloo, fp32, no mixed-precision policy); every
      micro-batch's forward all-gathers and its backward reduce-scatters, so every rank must
      run the same number of micro-batches in every step (the sampler's `micro` sync mode),
      which the script checks before each step and fails loudly, naming rank and step, if not.
      Inputs are then a pure function of (seed, epoch, sample id) (--inputs per-sample), so a
      single-process run of the same plan (emulated ranks, --inputs per-sample) trains on the
      same tensors: python/tests/test_sharded_torchrun.py compares the two.

Sequence parallelism (--sp, --sp-sizes: the sampler's sp and sp_sizes; default auto): the
planner may run a sample too big for one GPU on an aligned group of ranks (PlannedStep.groups).
  under torchrun: the groups are created once (sequence_parallel.new_sp_groups), and each rank
      runs each micro-batch on its group's SPContext (wan-dit's sp= path, Ulysses): every rank
      of the group holds the same per-sample inputs and its shard of the tokens, and back-
      propagates the whole samples' loss through its shard; the step's gradient sum over the
      world then counts each sample once (as python/tests/sp_plan_worker.py's reduce over the
      group, then 1/g on each rank), and the loss is normalised by the step's samples, a
      group's counted once. --model diffusers-wan has no sp path: a plan with groups is refused.
  emulated ranks: a group's micro-batch runs once, whole, without sequence parallelism (the
      same loss and gradients), when the first of the group's ranks reaches it (the group's
      first rank with --rank-order sequential); each rank of the group is charged 1/g of its
      time, and it is logged once, as the group's first rank's (position 0). A note on stderr
      says so.
  --adapt-every with groups is refused (the refit does not model groups yet).

Packing (--packing on; both: each strategy bucketed, then packed): the sampler plans packed
micro-batches (packing="on": samples of any buckets in one micro-batch) and each that mixes
shapes is trained as one pack, one varlen token sequence (wan-dit:
models.wan_dit_packed.flow_matching_loss_packed; diffusers-wan:
adaptiveload.diffusers.packed_forward); one of a single shape runs as an ordinary batch, as the
planner prices it. Each sample's inputs are the unpacked path's at its own bucket (with
--inputs per-sample, the same tensors), the loss is normalised as unpacked (per-sample losses
summed over the step's global samples).
Under torchrun, ddp wraps a PackedForward module (the pack through DDP's forward, so its
hooks run), fsdp2 registers the blocks' and the root's forward_packed with FSDP2. Plans with
sequence-parallel groups are refused (a pack trains its samples on one GPU).
--packed-forward buckets runs each pack as one ordinary batch per shape: the same losses and
gradients, the reference python/tests/test_sharded_torchrun.py checks packed runs against.

Manifests: a bad row stops the run naming file, line and field (--on-bad-row error, the
default); --on-bad-row skip leaves bad rows out and says on stderr how many, with the first
messages, as it says which rows fit no bucket or are oversize (--on-oversize skip). Every
numeric option is range-checked when parsed (an argparse error naming it).

Examples:
  python examples/train_dit.py --config tiny --strategy balanced --world-size 4 --steps 6
  python examples/train_dit.py --model diffusers-wan --config tiny --fused both --epoch --subset 200
  torchrun --nproc_per_node 8 examples/train_dit.py --config wan2.1-1.3b --layers 4 --device cuda
  torchrun --nproc_per_node 4 examples/train_dit.py --parallel fsdp2 --sync micro --epoch --subset 100
  torchrun --nproc_per_node 2 examples/train_dit.py --sp 2 --epoch --subset 10 --log-samples ids
  torchrun --nproc_per_node 2 examples/train_dit.py --parallel ddp --packing on --epoch --subset 100
The summary (one JSON object per strategy x kernel setting) goes to --out and stdout.
"""
import argparse
import contextlib
import csv
import inspect
import json
import math
import os
import random
import re
import sys
import time
from typing import Dict, List, Optional

import torch

try:
    import adaptiveload
except ImportError:  # running from a source checkout with the extension built in place
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import adaptiveload

from adaptiveload import calibrate, link
from adaptiveload import sequence_parallel as spl
from adaptiveload.models import wan_dit, wan_dit_packed
from adaptiveload.sampler import MAX_INT64, MAX_MEM_BUDGET, MAX_SEED, MAX_WORLD_SIZE
from adaptiveload.sampler._ranges import SYNCS
from data_feed import cache_feed, cache_inputs, check_feed_args, feed_order, media_encoder, media_feed, media_inputs

MODELS = ["wan-dit", "diffusers-wan"]
PARALLEL = ["ddp", "fsdp2"]
PACKINGS = {"off": [False], "on": [True], "both": [False, True]}  # --packing: the runs per strategy
# Strategies that plan packs whatever --packing says (greedy_pack), from the registry.
PACKING_STRATEGIES = {s["name"] for s in adaptiveload._C.strategies() if s["packs"]}
SP_MODES = ("auto", "min", "per-sample", "off")  # the sampler's sp words; or a group size
SP_MAX_GROUP = 128  # the core's largest group (kMaxGroup), as the sampler's sp_sizes check

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MANIFESTS = [os.path.join(HERE, "..", "data", f) for f in ("taichi_hd.csv", "coco2017_val_images.csv")]
PAPER = {"imbalance_equal_tokens": 0.39, "imbalance_dual": 0.189, "throughput_gain": 0.272, "vram_efficiency_gain": 0.227}


def whole(lo: int, hi: Optional[int] = None, what: str = ""):
    """An argparse type: a whole number in [lo, hi] (hi None: no upper bound; 4e4 is taken as
    40000). A value outside is an argparse error naming the option, not a crash later."""
    rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            try:
                x = float(text)
            except ValueError:
                x = math.nan
            if not (math.isfinite(x) and x.is_integer()):
                raise argparse.ArgumentTypeError(f"must be a whole number {rng}{what}, got {text!r}") from None
            n = int(x)
        if n < lo or (hi is not None and n > hi):
            raise argparse.ArgumentTypeError(f"must be {rng}{what}, got {n}")
        return n

    return parse


def positive_real(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return x


def sp_mode(text: str) -> str:
    """An argparse type: the sampler's sp (auto, min, per-sample, off) or one group size G, a
    power of two up to SP_MAX_GROUP."""
    if text in SP_MODES:
        return text
    if text.isdigit() and 1 <= int(text) <= SP_MAX_GROUP and int(text) & (int(text) - 1) == 0:
        return str(int(text))
    raise argparse.ArgumentTypeError(f"must be {', '.join(SP_MODES)} or a group size (a power of two, 1.."
                                     f"{SP_MAX_GROUP}), got {text!r}")


def sp_size_list(text: str) -> tuple:
    """An argparse type: allowed group sizes, a comma list of powers of two (1..SP_MAX_GROUP)."""
    parts = [t.strip() for t in text.split(",")]
    if not all(t.isdigit() and 1 <= int(t) <= SP_MAX_GROUP and int(t) & (int(t) - 1) == 0 for t in parts):
        raise argparse.ArgumentTypeError(f"must be a comma list of powers of two in 1..{SP_MAX_GROUP} (e.g. "
                                         f"1,2,4,8), got {text!r}")
    return tuple(sorted({int(t) for t in parts}))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--manifest", "-m", action="append", help="manifest file(s); default: the built-in demo set")
    p.add_argument("--model", default="wan-dit", choices=MODELS, help="wan-dit: our Wan-style DiT; diffusers-wan: "
                   "diffusers' WanTransformer3DModel with the same dimensions (default: %(default)s)")
    p.add_argument("--config", default="tiny", choices=sorted(wan_dit.CONFIGS), help="model dimensions")
    p.add_argument("--layers", type=whole(1), help="override the number of blocks (>= 1; default: the "
                   "config's)")
    p.add_argument("--strategy", default="balanced", help="equal_tokens, fixed, dual, balanced, or a comma list")
    p.add_argument("--fused", default="off", choices=["off", "on", "both"], help="fused adaLN kernel")
    p.add_argument("--packing", default="off", choices=sorted(PACKINGS), help="on: the sampler plans packed "
                   "micro-batches (packing='on': samples of any shapes in one micro-batch) and each is trained "
                   "as one pack, one varlen sequence (wan-dit: flow_matching_loss_packed); both: each strategy "
                   "bucketed, then packed (default: %(default)s)")
    p.add_argument("--packed-forward", default="varlen", choices=["varlen", "buckets"], help="how a pack is "
                   "trained: varlen, one forward over the pack's rows (a micro-batch of one shape: one ordinary "
                   "batch, as the planner prices it); buckets, one ordinary batch per shape in the pack (the same "
                   "losses and gradients: the reference a packed run is checked against; emulated ranks or "
                   "torchrun without --parallel) (default: %(default)s)")
    p.add_argument("--world-size", "-w", type=whole(1, MAX_WORLD_SIZE), default=4,
                   help="emulated ranks, 1..%d (ignored under torchrun)" % MAX_WORLD_SIZE)
    p.add_argument("--steps", type=whole(1), default=8, help="global steps to run per strategy (after "
                   "warm-up), >= 1")
    p.add_argument("--warmup", type=whole(0), default=1, help="global steps run first and not measured, "
                   ">= 0")
    p.add_argument("--epoch", action="store_true", help="run the whole epoch (every planned step; --steps is "
                   "ignored); the --warmup steps are run before it, from the same plan, and not measured")
    p.add_argument("--subset", type=whole(1), help="use a fixed subset of N >= 1 rows of each manifest: "
                   "rows floor(k * rows / N), k = 0..N-1 (default: all rows)")
    p.add_argument("--spread", action="store_true", help="run the steps spread evenly over the epoch (every "
                   "k-th step) instead of the first ones, so a short run sees the epoch's mix of buckets")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--planner-device", help="device preset for the planner (default: h200 on CUDA, cpu on CPU)")
    p.add_argument("--grid", help="bucket grid preset (default: wan, or tiny for --config tiny)")
    p.add_argument("--mem-budget", type=whole(1, MAX_MEM_BUDGET, " tokens"),
                   help="tokens per micro-batch (M_mem), 1..1e15; default: auto (tiny: 4096)")
    p.add_argument("--profile", help="calibrated cost profile for the planner")
    p.add_argument("--checkpointing", action="store_true", help="activation checkpointing in every block")
    p.add_argument("--seed", type=whole(0, MAX_SEED), default=0, help="0 <= seed < 2**64 (the plan's, "
                   "the weights' and the inputs')")
    p.add_argument("--threads", type=whole(1), help="torch CPU threads, >= 1 (default: torch's)")
    p.add_argument("--clock", default="wall", choices=["wall", "thread"], help="CPU timing: wall clock, or this "
                   "thread's CPU time (with --threads 1; leaves out other processes on a shared machine)")
    p.add_argument("--adapt-every", type=whole(1, MAX_INT64), help="online adaptation: refit the "
                   "cost model to the measured per-rank step times every N >= 1 steps and re-plan the rest of "
                   "the epoch")
    p.add_argument("--lr", type=positive_real, default=1e-4, help="AdamW learning rate, finite and > 0")
    p.add_argument("--on-bad-row", default="error", choices=["error", "skip"], help="a bad manifest row: error "
                   "(stop, naming file, line and field) or skip (leave it out; how many and the first messages "
                   "go to stderr) (default: %(default)s)")
    p.add_argument("--on-duplicate", default="warn", choices=["warn", "skip", "error"], help="rows repeating an "
                   "earlier row's path: warn (keep them, say so), skip (keep the first of each path) or error "
                   "(default: %(default)s)")
    p.add_argument("--on-oversize", default="error", choices=["error", "skip"], help="a sample too big for memory "
                   "even on the largest allowed sequence-parallel group: error, or skip (left out; reported on "
                   "stderr) (default: %(default)s)")
    p.add_argument("--sp", type=sp_mode, default="auto", help="sequence parallelism, as the sampler's sp: auto, "
                   "min, per-sample, off, or a group size G for every sample (default: %(default)s). Under "
                   "torchrun a group's ranks run its micro-batch together (Ulysses, wan-dit only); with "
                   "emulated ranks it runs once (see the module docstring)")
    p.add_argument("--sp-sizes", type=sp_size_list, default=(1, 2, 4, 8), help="allowed group sizes, powers of two "
                   "(default: 1,2,4,8)")
    p.add_argument("--parallel", choices=PARALLEL, help="under torchrun: ddp (DistributedDataParallel with no_sync) "
                   "or fsdp2 (fully_shard); default: plain model, one explicit all-reduce per step")
    p.add_argument("--sync", choices=[m for m in SYNCS if m != "auto"], help="the sampler's sync mode: step (ranks may run different "
                   "numbers of micro-batches in a step; DDP) or micro (the same number on every rank; FSDP). "
                   "Default: micro with --parallel fsdp2, else the sampler's default")
    p.add_argument("--inputs", choices=["stream", "per-sample"], help="stream: random inputs drawn in turn (per "
                   "rank); per-sample: each sample's latents, text, timestep and noise a pure function of (seed, "
                   "epoch, sample id), so runs with different world sizes or wrappers train on the same tensors. "
                   "Default: per-sample with --parallel, else stream; a micro-batch on a sequence-parallel group "
                   "always uses per-sample inputs (its ranks must hold the same tensors)")
    p.add_argument("--time-inputs", default="profile", choices=["profile", "on", "off"],
                   help="whether each micro-batch's timing holds the drawing of its inputs (this script's data "
                        "loading): on, off, or profile (default): as the profile was calibrated (calibrate "
                        "--time-inputs sets its fit.inputs_timed; off without a profile). The stream draw is "
                        "what calibrate times; per-sample and pack inputs also draw each sample's timestep and "
                        "noise on the CPU")
    p.add_argument("--save-model", help="after the run, write the model's full state dict (torch.save) here "
                   "(under torchrun, rank 0 writes it; FSDP2's shards are gathered)")
    p.add_argument("--rank-order", default="sequential", choices=["sequential", "interleaved"],
                   help="emulated ranks: sequential runs a step's micro-batches rank by rank (rank 0's, then "
                   "rank 1's, ...); interleaved spreads every rank's micro-batches over the step (by their "
                   "planned prices, a rank's own in order), so a drift of the machine's speed within a step "
                   "falls on every rank alike, as on ranks that run at once. The same micro-batches and "
                   "losses; the gradient sums in another order. Ignored under torchrun (default: %(default)s)")
    p.add_argument("--interleave", action="store_true", help="advance the runs (every strategy x --fused x "
                   "--packing) one global step each in turn instead of one run after another, so a drift of the "
                   "machine's speed (clock frequency, caches, other load) falls on every run alike and their "
                   "ratios pair step by step; each run keeps its own model, optimizer and plan")
    p.add_argument("--data", default="random", choices=["random", "cache", "media"], help="random: latents and "
                   "text drawn at each row's bucket; cache: read from a latent cache folder (--cache, made by "
                   "python -m adaptiveload.cache or musubi-tuner), which is then the manifest; media: the "
                   "manifest's clips and images decoded at their buckets in DataLoader workers "
                   "(adaptiveload.media.MediaDataset) and encoded by a VAE in the loop (--vae), text embeddings "
                   "drawn per sample. cache and media report the seconds each rank waited for the loader")
    p.add_argument("--cache", help="the latent cache folder of --data cache")
    p.add_argument("--media-root", help="--data media: the folder the manifest's relative paths are under (scan's "
                   "--root; default: the current directory)")
    p.add_argument("--vae", help="--data media: a local diffusers VAE folder (from_pretrained; AutoencoderKLWan "
                   "for Wan); default: a tiny randomly initialised AutoencoderKLWan (Wan's 16 channels and 4x8x8 "
                   "strides)")
    p.add_argument("--num-workers", type=whole(0), default=0, help="DataLoader workers per rank reading the cache "
                   "or decoding the media (--data cache / media)")
    p.add_argument("--out", help="write the summaries (JSON list) here")
    p.add_argument("--log-samples", help="append the sample ids each rank trained, one JSON line per micro-batch "
                   "(under torchrun, one file per process: PATH.rankN); a micro-batch on a sequence-parallel "
                   "group is logged by each of its ranks (\"group\", \"position\"), count position 0")
    return p.parse_args(argv)


class Timer:
    """Times a region on the device: CUDA events on GPU; on CPU perf_counter (clock "wall") or
    the calling thread's CPU time (clock "thread": with --threads 1 torch computes forward and
    backward on this thread, so time other processes take from a shared machine is left out)."""

    def __init__(self, device: torch.device, clock: str = "wall"):
        self.cuda = device.type == "cuda"
        self.now = time.thread_time if clock == "thread" else time.perf_counter

    def __enter__(self):
        if self.cuda:
            self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.a.record()
        else:
            self.t0 = self.now()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.b.record()
        else:
            self.seconds = self.now() - self.t0

    def elapsed(self) -> float:
        if self.cuda:
            self.b.synchronize()
            return self.a.elapsed_time(self.b) / 1000.0
        return self.seconds


def sync_wait() -> float:
    """Under torchrun with the explicit all-reduce: the wall seconds this rank waits at a
    barrier for the step's slowest rank to finish its micro-batches (after the device has
    finished them), measured apart from the all-reduce that follows, so the all-reduce and
    optimizer time (the step's sync seconds) holds no wait and the idle fraction is measured
    at the ranks, not inferred from their compute times."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.distributed.barrier()
    return time.perf_counter() - t0


def metrics(times: List[List[float]], samples: int, tokens: int, extra_s: List[float]) -> Dict[str, float]:
    """DESIGN.md's metrics from per-(step, rank) compute times T[t][r] (the same formulas as
    the planner's simulator): idle fraction, per-step variants, throughput."""
    sum_mean = sum_max = step_mean = step_maxmin = total = 0.0
    for T, extra in zip(times, extra_s):
        mx, mn, mean = max(T), min(T), sum(T) / len(T)
        sum_mean += mean
        sum_max += mx
        if mx > 0:
            step_mean += (mx - mean) / mx
            step_maxmin += (mx - mn) / mx
        total += mx + extra
    n = max(len(times), 1)
    return {
        "imbalance": 1 - sum_mean / sum_max if sum_max > 0 else 0.0,
        "imbalance_step_mean": step_mean / n,
        "imbalance_step_maxmin": step_maxmin / n,
        "throughput_samples_per_s": samples / total if total > 0 else 0.0,
        "throughput_tokens_per_s": tokens / total if total > 0 else 0.0,
        "time_s": total,
        "steps": len(times),
        "samples": samples,
    }


def profile_jitter(path: Optional[str]) -> Optional[dict]:
    """The profile's "jitter" (calibrate.fit_jitter: how much a micro-batch's seconds vary
    between runs, against its seconds), or None (no profile, or one calibrated without it)."""
    if not path:
        return None
    with open(path) as f:
        return json.load(f).get("jitter")


def profile_inputs_timed(path: Optional[str]) -> bool:
    """Whether the profile was calibrated with each micro-batch's inputs drawn inside its timing
    (calibrate --time-inputs: fit.inputs_timed): then each micro-batch here is timed with its
    inputs too, so measured and priced seconds hold the same work (this miniature's data loading)."""
    if not path:
        return False
    with open(path) as f:
        return bool(json.load(f).get("fit", {}).get("inputs_timed", False))


def inputs_timed_of(args) -> bool:
    """--time-inputs resolved: on, off, or (profile) as the profile was calibrated."""
    return profile_inputs_timed(args.profile) if args.time_inputs == "profile" else args.time_inputs == "on"


def jitter_prediction(mb_times, jitter: dict, samples: int, tokens: int, extra_s: List[float],
                      draws: int = 200, seed: int = 0) -> Dict[str, float]:
    """metrics() of the epoch the cost model prices when every micro-batch's seconds vary as
    calibration measured them: each micro-batch (mb_times[t][r][i], its price) takes
    price * exp(sigma(price) Z), Z standard normal (the median stays the price), so a step waits
    for the slowest of its ranks' noisy sums, which pricing each micro-batch at one value does
    not see. The mean of `draws` such epochs (a fixed seed: the same figures every run)."""
    rng = random.Random(seed)
    sig = [[[calibrate.jitter_sigma(jitter, x) for x in rank] for rank in step] for step in mb_times]
    out = {"imbalance": 0.0, "throughput_samples_per_s": 0.0, "throughput_tokens_per_s": 0.0, "time_s": 0.0}
    for _ in range(draws):
        times = [[sum(x * math.exp(s * rng.gauss(0.0, 1.0)) for x, s in zip(rank, srank))
                  for rank, srank in zip(step, sstep)] for step, sstep in zip(mb_times, sig)]
        m = metrics(times, samples, tokens, extra_s)
        for k in out:
            out[k] += m[k] / draws
    return dict(out, steps=len(mb_times), samples=samples, draws=draws)


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


def buckets_loss(model, x0s, ctxs, t, noises) -> torch.Tensor:
    """A pack's per-sample losses [n] with one ordinary batch per shape (--packed-forward buckets):
    the samples of each shape stacked, flow_matching_loss_of, the losses back in pack order."""
    by_shape: Dict[tuple, List[int]] = {}
    for k, x0 in enumerate(x0s):
        by_shape.setdefault(tuple(x0.shape), []).append(k)
    parts, order = [], []
    for ks in by_shape.values():
        stack = lambda v: torch.stack([v[k] for k in ks])  # noqa: E731
        parts.append(flow_matching_loss_of(model, stack(x0s), stack(ctxs), t[ks], stack(noises)))
        order += ks
    per = torch.cat(parts)
    return per[torch.argsort(torch.tensor(order, device=per.device))]


def flow_matching_loss_of(model, x0, ctx, t, noise, sp: Optional[spl.SPContext] = None,
                          patch=(1, 2, 2)) -> torch.Tensor:
    """wan_dit.flow_matching_loss with the timestep t [B] and noise given: per-sample MSE [B].
    With sp (every rank of the group passing the same x0, ctx, t, noise; wan-dit only): the
    model returns this rank's shard of the patch predictions [B, S_p, C*pt*ph*pw]; each rank
    sums its shard's squared errors, the sums are added over the group, so every rank returns
    the whole samples' losses, and backward reaches only this rank's tokens (as
    wan_dit.flow_matching_loss(..., sp=) does)."""
    tt = t.view(-1, 1, 1, 1, 1).to(x0.dtype)
    xt = (1 - tt) * x0 + tt * noise
    if sp is not None:
        pred = model(xt, t * 1000, ctx, sp=sp)
        target = wan_dit.patchify(noise - x0, patch)
        start, end = sp.bounds(target.shape[1])
        partial = (pred.float() - target[:, start:end].float()).pow(2).flatten(1).sum(1)  # [B]
        return spl.all_reduce_sum(partial, sp) / x0[0].numel()
    pred = model(xt, t * 1000, ctx)
    return (pred.float() - (noise - x0).float()).pow(2).flatten(1).mean(1)


class PackedForward(torch.nn.Module):
    """The model on a PackedBatch -> its patch predictions [N, C*pt*ph*pw], as a module's forward
    (what DistributedDataParallel wraps: its gradient hooks are armed by its forward): wan-dit's
    forward_packed, or adaptiveload.diffusers.packed_forward for diffusers-wan. Given anything
    else (an ordinary batch: a packed plan's micro-batch of one shape), the model's forward."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        from adaptiveload.packing import PackedBatch

        if len(args) != 1 or kwargs or not isinstance(args[0], PackedBatch):
            return self.model(*args, **kwargs)
        packed = args[0]
        if isinstance(self.model, DiffusersWan):
            # diffusers' packed forward takes lists (Wan's convention) and packs them itself:
            # the pack's samples and texts out, its per-sample predictions back to pack rows.
            from adaptiveload.packing import pack, unpack

            cu = packed.cu_seqlens_text.tolist()
            texts = [packed.text[a:b] for a, b in zip(cu[:-1], cu[1:])]
            t = packed.timesteps
            if t.numel() != packed.num_samples:  # per token: each sample's rows
                t = list(torch.split(t, (packed.cu_seqlens[1:] - packed.cu_seqlens[:-1]).tolist()))
            preds = _adaptiveload_diffusers().packed_forward(self.model.inner, unpack(packed.tokens, packed), t, texts)
            return pack(preds, packed.patch).tokens
        return self.model.forward_packed(packed)


def parallelize(model: torch.nn.Module, parallel: Optional[str], device: torch.device,
                packed: bool = False) -> torch.nn.Module:
    """The parallel layout, in one place: the model the training loop calls (packed: the module
    the loop calls on a PackedBatch, a PackedForward). ddp: a DistributedDataParallel wrapper
    (buffers not broadcast in forward: ranks run different numbers of forwards per step in
    `step` mode, and the model's buffers are constant). fsdp2: fully_shard on each transformer
    block, then on the root (the embeddings and head), parameters become DTensor shards;
    resharded after forward (ZeRO-3); packed, the blocks' and the root's forward_packed are
    registered as forward methods, so FSDP2 gathers and reshards around them as around
    forward. On CPU this runs with gloo and fp32 parameters: no MixedPrecisionPolicy, no
    CPUOffloadPolicy needed."""
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(PackedForward(model) if packed else model, broadcast_buffers=False,
                                       device_ids=[device.index] if device.type == "cuda" else None)
    if parallel == "fsdp2":
        from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

        blocks = model.inner.blocks if isinstance(model, DiffusersWan) else model.blocks
        for block in blocks:
            fully_shard(block)
        fully_shard(model)
        if packed:  # wan-dit (run_strategy refuses diffusers-wan packed under fsdp2)
            for block in blocks:
                register_fsdp_forward_method(block, "forward_packed")
            register_fsdp_forward_method(model, "forward_packed")
    return PackedForward(model) if packed else model


def check_micro_batch_counts(n: int, step: int, rank: int, world: int) -> None:
    """FSDP2 runs collectives in every micro-batch's forward and backward: a rank with fewer
    micro-batches than the others in a step would leave them waiting forever. All ranks
    gather every rank's count and all raise alike, so the job fails instead of hanging."""
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    torch.distributed.all_gather(counts, torch.tensor([n], dtype=torch.int64))
    counts = [int(x) for x in counts]
    if len(set(counts)) != 1:
        raise RuntimeError(f"train_dit.py --parallel fsdp2: rank {rank}, step {step}: micro-batches per rank "
                           f"{counts} differ; FSDP2 needs the same count on every rank (plan with sync='micro', "
                           f"--sync micro, or a one-micro-batch strategy such as dual)")


def full_state_dict(model: torch.nn.Module, parallel: Optional[str]) -> Dict[str, torch.Tensor]:
    """The unwrapped model's full state dict on CPU (a collective under fsdp2: every rank calls
    it; rank 0 gets the tensors)."""
    if parallel:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def sampler_sync_options(args, strategy: str) -> dict:
    """The sampler's sync keyword (sync='micro' for FSDP2 unless --sync says otherwise), if
    the installed sampler has it."""
    sync = args.sync or ("micro" if args.parallel == "fsdp2" else None)
    if sync is None:
        return {}
    if "sync" in inspect.signature(adaptiveload.AdaptiveBatchSampler.__init__).parameters:
        return {"sync": sync}
    if sync == "micro" and strategy == "balanced":
        sys.exit("train_dit.py: this adaptiveload's AdaptiveBatchSampler has no sync= option, and balanced in step "
                 "mode gives ranks different numbers of micro-batches, which FSDP2 cannot run: use a strategy "
                 "with one micro-batch per rank per step (--strategy dual) or a newer adaptiveload")
    return {}  # one micro-batch per rank per step already, or step mode (the default)


def diffusers_wan_config(c: wan_dit.WanDiTConfig) -> dict:
    """WanTransformer3DModel's config with c's dimensions: for wan2.1-1.3b, the config of
    Wan 2.1 T2V 1.3B (12 heads of 128, ffn 8960, umT5 text 4096 wide, cross-attention norm)."""
    return dict(patch_size=tuple(c.patch), num_attention_heads=c.heads, attention_head_dim=c.dim // c.heads,
                in_channels=c.in_channels, out_channels=c.in_channels, text_dim=c.text_dim, freq_dim=c.freq_dim,
                ffn_dim=c.ffn_dim, num_layers=c.layers, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                eps=c.eps, rope_max_seq_len=1024)


def _adaptiveload_diffusers():
    try:
        from adaptiveload import diffusers as al_diffusers
    except ImportError:  # an installed adaptiveload older than the module: the checkout's copy
        adaptiveload.__path__.append(os.path.join(HERE, "..", "python", "adaptiveload"))
        from adaptiveload import diffusers as al_diffusers
    return al_diffusers


class DiffusersWan(torch.nn.Module):
    """diffusers' WanTransformer3DModel (random weights) called as WanDiT is: (x [B, C, f, h, w]
    latents, t [B] in [0, 1000), context [B, L, text_dim]) -> [B, C, f, h, w]."""

    def __init__(self, c: wan_dit.WanDiTConfig, fused_adaln: bool = False, checkpointing: bool = False):
        super().__init__()
        from diffusers import WanTransformer3DModel

        self.c = c  # the patch a pack is made with (wan_dit_packed.flow_matching_loss_packed reads model.c)
        self.inner = WanTransformer3DModel(**diffusers_wan_config(c))
        if checkpointing:
            self.inner.enable_gradient_checkpointing()
        if fused_adaln:
            _adaptiveload_diffusers().use_fused_adaln(self.inner)

    def forward(self, x, t, context):
        return self.inner(x, t, context, return_dict=False)[0]


def build_model(name: str, c: wan_dit.WanDiTConfig, fused: bool, checkpointing: bool) -> torch.nn.Module:
    if name == "diffusers-wan":
        return DiffusersWan(c, fused_adaln=fused, checkpointing=checkpointing)
    return wan_dit.WanDiT(c, fused_adaln=fused, checkpointing=checkpointing)


SUBSET_ROW = re.compile(r"<manifest list, 0-based row>:(\d+)")  # how the sampler names a row of a list of dicts
MANIFEST_KEYS = ("path", "num_frames", "height", "width")


def load_subset(paths: List[str], n: int, on_bad_row: str) -> tuple:
    """A fixed subset: n rows of each manifest (CSV or JSONL), rows floor(k * rows / n).
    Returns (rows as dicts, each row's "file:line", messages of the JSONL lines that are not
    an object with the manifest's keys, left out under on_bad_row 'skip'; 'error' raises
    ValueError naming file and line). The sampler checks the rows' fields."""
    out, origins, bad = [], [], []
    for path in paths:
        rows, lines = [], []
        with open(path, newline="") as f:
            if path.endswith((".jsonl", ".json")):
                for line_no, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line.strip())
                        why = "" if isinstance(row, dict) else f"a JSON {type(row).__name__}, not an object"
                    except ValueError as e:
                        why = f"not JSON ({e})"
                    if not why:
                        missing = [k for k in MANIFEST_KEYS if k not in row]
                        why = f"no {', '.join(repr(k) for k in missing)} key" if missing else ""
                    if why:
                        if on_bad_row == "error":
                            raise ValueError(f"{path}:{line_no}: {why}; --on-bad-row skip leaves bad rows out")
                        bad.append(f"{path}:{line_no}: {why}")
                        continue
                    rows.append(row)
                    lines.append(f"{path}:{line_no}")
            else:
                reader = csv.DictReader(f)
                for row in reader:
                    rows.append(row)
                    lines.append(f"{path}:{reader.line_num}")
        k = min(n, len(rows))
        for i in range(k):
            out.append(rows[i * len(rows) // k])
            origins.append(lines[i * len(rows) // k])
    return out, origins, bad


def locate(message: str, origins: List[str]) -> str:
    """A sampler message about row K of the subset, with the row's file and line."""
    return SUBSET_ROW.sub(lambda m: f"{origins[int(m.group(1))]} (subset row {m.group(1)})", message)


def report_left_out(sampler, bad_rows: List[str], origins: List[str], shown: int = 5) -> None:
    """Says on stderr what the plan leaves out, never silently: bad rows skipped (--on-bad-row
    skip) and rows that fit no bucket or are oversize (--on-oversize skip), each with the
    first `shown` messages (origins: a subset's rows' file:line)."""
    def say(head: str, lines: List[str]) -> None:
        print(f"train_dit.py: {head}", file=sys.stderr)
        for m in lines[:shown]:
            print(f"  {m}", file=sys.stderr)
        if len(lines) > shown:
            print(f"  ... and {len(lines) - shown} more", file=sys.stderr)

    bad = list(bad_rows) + [locate(m, origins) for m in sampler.bad_rows]
    if bad:
        say(f"skipped {len(bad)} bad manifest row(s) (--on-bad-row skip):", bad)
    left = sampler.left_out
    if left:
        say(f"{len(left)} row(s) not planned (they fit no bucket of the grid, or are oversize under "
            f"--on-oversize skip):", [f"row {row}: {why}" for row, why in left])


_SP_GROUPS: Dict[tuple, dict] = {}


def sp_groups(world: int, sizes: List[int]) -> dict:
    """{(size, rank): SPContext} for the sizes the plan may use, created once per job
    (new_sp_groups is collective: every rank calls it, with the same sizes, in the same order)."""
    key = (world, tuple(sizes))
    if key not in _SP_GROUPS:
        _SP_GROUPS[key] = spl.new_sp_groups(world, sizes)
    return _SP_GROUPS[key]


def largest_group(samplers) -> int:
    """The largest sequence-parallel group in these samplers' plans of the epoch (1: none)."""
    return max([len(g) for s in samplers for st in s.schedule() for g in st.groups] or [1])


def mem_budget_of(args) -> Optional[int]:
    """The planner's memory budget in tokens per micro-batch: --mem-budget, or 4096 for --config
    tiny (a CPU's micro-batch), else None (auto: the device preset's memory)."""
    return args.mem_budget if args.mem_budget is not None else (4096 if args.config == "tiny" else None)


def check_packed_model(args, ddp: bool) -> None:
    """Refuses, naming what to do, a packed run the model or the layout cannot train."""
    if args.packed_forward == "buckets":
        if ddp and args.parallel:
            sys.exit(f"train_dit.py: --packed-forward buckets runs a pack as one batch per shape, several forwards "
                     f"before one backward, which --parallel {args.parallel} does not take; use it with emulated "
                     "ranks or torchrun without --parallel, or --packed-forward varlen")
        return
    if args.model == "diffusers-wan":
        if ddp and args.parallel == "fsdp2":
            sys.exit("train_dit.py: --packing on with --model diffusers-wan under --parallel fsdp2: FSDP2 gathers "
                     "a block's parameters around its forward, and diffusers' packed forward is not registered "
                     "with it; use --parallel ddp, --model wan-dit, or --packing off")


def run_strategy(args, strategy: str, fused: bool, dist_rank: int, dist_world: int, report: bool = True,
                 packing: bool = False) -> dict:
    """One run (a strategy, a kernel setting, a packing) start to end: its summary."""
    run = strategy_steps(args, strategy, fused, dist_rank, dist_world, report, packing)
    while True:
        try:
            next(run)
        except StopIteration as done:
            return done.value


def run_interleaved(runs: list) -> list:
    """Advances the runs (strategy_steps generators) one global step of their loops each in turn
    (a run's set-up and epoch warm-up come with its first turn), in their order, until each has
    ended: a drift of the machine's speed (clock frequency, caches,
    other load) then falls on every run alike, step by step, instead of on whichever ran at the
    time. Returns their summaries in the runs' order. Every rank of a torchrun job takes the
    same turns (the plans are the same on every rank), so the collectives match."""
    results = [None] * len(runs)
    live = list(range(len(runs)))
    while live:
        for i in list(live):
            try:
                next(runs[i])
            except StopIteration as done:
                results[i] = done.value
                live.remove(i)
    return results


def interleaved_order(prices: List[List[float]]) -> List[tuple]:
    """The order in which emulated ranks run their micro-batches with --rank-order interleaved:
    (rank position, micro-batch index) pairs. prices[k] is rank k's micro-batches' prices in
    plan order; each micro-batch is placed at the midpoint of its span in its rank's share of
    the step ((price before it + half its own) over the rank's total), and all run in that
    order, so every rank's work spreads over the step's whole time as on ranks that run at once,
    and a drift of the machine's speed within the step falls on every rank alike. A rank's own
    micro-batches keep their order; ties go to the lower rank."""
    keyed = []
    for k, row in enumerate(prices):
        total = sum(row)
        before = 0.0
        for i, x in enumerate(row):
            mid = (before + x / 2) / total if total > 0 else (i + 0.5) / len(row)
            keyed.append((mid, k, i))
            before += x
    keyed.sort()
    return [(k, i) for _, k, i in keyed]


def strategy_steps(args, strategy: str, fused: bool, dist_rank: int, dist_world: int, report: bool = True,
                   packing: bool = False):
    """A generator of one run: it sets the run up (samplers, model, warm-up) and trains one
    global step a turn, yielding after each step of the loop; its return value (StopIteration's)
    is the run's summary. run_strategy runs it to the end, run_interleaved beside others."""
    device = torch.device(args.device)
    ddp = dist_world > 1
    # Trained as packs: packing asked for, or a strategy that always packs (its micro-batches mix shapes).
    packs = packing or strategy in PACKING_STRATEGIES
    if packs:
        check_packed_model(args, ddp)
        if args.sp.isdigit() and int(args.sp) > 1:
            sys.exit(f"train_dit.py: --sp {args.sp} runs every sample on a sequence-parallel group of {args.sp}, "
                     "and a pack trains its samples on one GPU; use --sp auto or off with --packing on, or "
                     "--packing off")
    W = dist_world if ddp else args.world_size
    c = wan_dit.config(args.config, args.layers)
    grid = args.grid or ("tiny" if args.config == "tiny" else "wan")
    planner_device = args.planner_device or ("h200" if device.type == "cuda" else "cpu")
    mem_budget = mem_budget_of(args)
    manifests = args.manifest or DEFAULT_MANIFESTS
    if args.data == "cache":
        if not args.cache or args.manifest:
            sys.exit("train_dit.py: --data cache trains from the cache folder --cache DIR (it is the manifest; "
                     "no --manifest)")
        manifests = args.cache
    elif args.data == "media" and not args.manifest:
        sys.exit("train_dit.py: --data media decodes the files of a manifest: give --manifest (made by adaptiveload "
                 "scan) and --media-root, the folder its relative paths are under")
    subset_bad: List[str] = []
    origins: List[str] = []
    try:
        if args.subset is not None:
            manifests, origins, subset_bad = load_subset(manifests, args.subset, args.on_bad_row)
        samplers = [
            adaptiveload.AdaptiveBatchSampler(
                manifests, model=c.preset, device=planner_device, grid=grid, strategy=strategy, world_size=W,
                rank=r, seed=args.seed, mem_budget=mem_budget, profile=args.profile,
                checkpointing=args.checkpointing, on_bad_row=args.on_bad_row, on_oversize=args.on_oversize,
                on_duplicate=args.on_duplicate, sp=args.sp, sp_sizes=args.sp_sizes, adapt_every=args.adapt_every,
                **sampler_sync_options(args, strategy), **({"packing": "on"} if packing else {}))
            for r in ([dist_rank] if ddp else range(W))
        ]
    except (OSError, ValueError) as e:  # a bad row, a missing file, an option the planner refuses
        msg = locate(str(e), origins)
        for keyword, option in (("on_bad_row='skip'", "--on-bad-row skip"),
                                ("on_oversize='skip'", "--on-oversize skip"),
                                ("packing='off'", "--packing off"), ("sp='auto'", "--sp auto")):
            msg = msg.replace(keyword, option)  # the sampler's advice, in this script's options
        sys.exit("train_dit.py: " + msg)
    if report and dist_rank == 0:
        report_left_out(samplers[0], subset_bad, origins)
    # Sequence parallelism: the largest group any rank's micro-batches run on (the same on every
    # rank: under torchrun the ranks' maxima are all-reduced, so all agree to create the groups).
    max_group = largest_group(samplers)
    if ddp:
        m = torch.tensor([max_group], dtype=torch.int64)
        torch.distributed.all_reduce(m, op=torch.distributed.ReduceOp.MAX)
        max_group = int(m)
    if max_group > 1:
        if ddp and args.model != "wan-dit":
            sys.exit(f"train_dit.py: the plan runs some samples on sequence-parallel groups of up to {max_group} "
                     "ranks, which only --model wan-dit implements (Ulysses); use --model wan-dit, or plan with "
                     "--sp off (a sample that fits no single GPU is then oversize: --on-oversize skip leaves it out)")
        if args.adapt_every is not None:
            sys.exit(f"train_dit.py: the plan runs some samples on sequence-parallel groups of up to {max_group} "
                     "ranks, and online adaptation (--adapt-every) does not model groups yet; drop --adapt-every "
                     "or plan with --sp off")
        if not ddp and report:
            print(f"train_dit.py: note: the plan runs some samples on sequence-parallel groups of up to {max_group} "
                  "ranks; emulated ranks run each such micro-batch once, whole, on its group's first rank, and "
                  "charge every rank of the group 1/g of its time (under torchrun the group's ranks run it "
                  "together, split over the sequence)", file=sys.stderr)
    groups = sp_groups(dist_world, samplers[0].sp_sizes()) if ddp and max_group > 1 else {}
    torch.manual_seed(args.seed)
    model = build_model(args.model, c, fused, args.checkpointing).to(device)
    # Every rank builds the same weights (same seed) before wrapping: FSDP2 keeps each rank's
    # shard of them, DDP broadcasts rank 0's.
    # A pack through one varlen forward: the loop calls `wrapped` on a PackedBatch.
    varlen = packs and args.packed_forward == "varlen"
    wrapped = parallelize(model, args.parallel if ddp else None, device, packed=varlen)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    amp = device.type == "cuda"
    dtype = torch.float32
    gen = torch.Generator().manual_seed((args.seed + 1000 * dist_rank) % 2**64)
    per_sample = (args.inputs or ("per-sample" if args.parallel else "stream")) == "per-sample"
    feed = encode = None
    if args.data != "random":  # the loop's micro-batches read ahead; per-sample timesteps and noise
        per_sample = True
        check_feed_args(args, args.rank_order == "interleaved" and not ddp)
        order = feed_order(samplers, args, samplers[0].num_steps)
        if args.data == "cache":
            feed = cache_feed(args.cache, samplers[0], order, args.num_workers)
        else:
            encode = media_encoder(args.vae, device)
            feed = media_feed(samplers[0], order, args.num_workers, args.media_root)
    # The gradient of a step is the mean over its global samples: DDP and FSDP2 average over
    # the W ranks, so each rank scales by W; the explicit all-reduce below and the emulated
    # ranks sum. A micro-batch on a sequence-parallel group: each of its ranks back-propagates
    # the whole samples' loss through its own tokens only, so its gradient is its share of the
    # samples' gradient, and the sum over the group's ranks is the gradient once. The world's
    # sum (the all-reduce, or DDP's / FSDP2's reduction times W) therefore counts each of a
    # group's samples once, as sp_plan_worker.py's reduce_gradients over the group then 1/g on
    # each rank does, without a collective per micro-batch: the normaliser counts it once too.
    loss_scale = W if ddp and args.parallel else 1
    # One log per process (ranks of a torchrun job append to their own file).
    log_path = f"{args.log_samples}.rank{dist_rank}" if args.log_samples and ddp else args.log_samples
    # Line-buffered: interleaved runs (--interleave) append to the same file, a whole line each.
    log = open(log_path, "a", buffering=1) if log_path else None
    group_seconds: Dict[tuple, float] = {}  # emulated ranks: a group micro-batch's time, by (step, ranks, ids)
    mixed = [0, 0]  # packs this process trained in the measured steps, and those of them mixing shapes

    def train_step(steps, log_it: bool, measured: bool = True):
        """This process's micro-batches of one global step (one sampler per emulated rank, or
        this rank's), the gradient sync, the optimizer step (measured: a step the summary
        counts, not a warm-up). Returns (per-rank compute seconds, sync + optimizer seconds,
        under torchrun this rank's (busy, wait) wall seconds up to and at the step's barrier:
        see sync_wait; else None)."""
        rank_times = [0.0] * len(samplers)
        t_start = time.perf_counter()
        if feed is not None:  # the loader's waits counted in measured steps only
            feed.counting = measured
        if ddp and args.parallel == "fsdp2":
            check_micro_batch_counts(len(steps[0].micro_batches), steps[0].step, dist_rank, dist_world)
        if interleave_ranks:  # emulated ranks, each rank's micro-batches spread over the step
            order = interleaved_order([[mb_times[st.step - plan_first][s.rank][i] for i in range(len(st.micro_batches))]
                                       for s, st in zip(samplers, steps)])
        else:  # rank by rank (one sampler under torchrun)
            order = [(k, i) for k, st in enumerate(steps) for i in range(len(st.micro_batches))]
        for k, i in order:
            s, st = samplers[k], steps[k]
            mb = st.micro_batches[i]
            n = len(st.micro_batches)
            ranks = tuple(st.groups[i]) if st.groups else (s.rank,)
            g = len(ranks)
            key = (st.step, ranks, tuple(mb))
            if g > 1 and not ddp and key in group_seconds:
                # emulated: the group's first visit ran it; each of its ranks is charged once
                seconds, left = group_seconds[key]
                rank_times[k] += seconds
                if left == 1:
                    del group_seconds[key]
                else:
                    group_seconds[key] = (seconds, left - 1)
                continue
            sp = groups[(g, dist_rank)] if g > 1 and ddp else None

            def draw(s=s, mb=mb, st=st, g=g):
                # A group's ranks must hold the same tensors: per-sample inputs.
                if encode is not None:
                    return media_inputs(feed.take(mb, s.rank), encode, s, c, args.seed, st.epoch, device, dtype, packs)
                if feed is not None:
                    return cache_inputs(feed.take(mb, s.rank), c, args.seed, st.epoch, device, dtype, packs)
                if packs:  # each sample at its own bucket (packing plans no groups)
                    return pack_inputs(s, mb, c, device, dtype, args.seed, st.epoch, None if per_sample else gen)
                if per_sample or g > 1:
                    return sample_inputs(s, mb, c, args.seed, st.epoch, device, dtype)
                return make_batch(s, mb, c, device, dtype, gen) + (None, None)
            # Drawn before the timing, or inside it (--time-inputs: on, or as the profile was calibrated).
            inputs = None if inputs_timed else draw()
            # DDP: one all-reduce per step, in the last micro-batch's backward.
            no_sync = args.parallel == "ddp" and ddp and i + 1 < n
            with Timer(device, args.clock) as tm, (wrapped.no_sync() if no_sync else contextlib.nullcontext()):
                x0, ctx, tt, noise = inputs or draw()
                shapes = len({tuple(x.shape) for x in x0}) if packs else 1  # a pack's distinct latent shapes
                with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
                    # A micro-batch of one shape runs as one ordinary batch, packed plan or not:
                    # the planner prices it so (only a pack of several shapes pays the packed
                    # forward's cost per sample, the profile's pack_sample_s).
                    if varlen and shapes > 1:
                        per = wan_dit_packed.flow_matching_loss_packed(model, x0, ctx, t=tt, noises=noise,
                                                                       forward=wrapped)
                    elif packs:
                        per = buckets_loss(wrapped, x0, ctx, tt, noise)
                    elif per_sample or g > 1:
                        per = flow_matching_loss_of(wrapped, x0, ctx, tt, noise, sp, c.patch)
                    else:
                        per = wan_dit.flow_matching_loss(wrapped, x0, ctx)
                    # Padded repeats are trained too (every rank runs its micro-batches), so they
                    # count in the normaliser.
                    loss = per.sum() * loss_scale / (st.global_samples + st.padded_samples)
                loss.backward()
            seconds = tm.elapsed()
            if g > 1 and not ddp:
                seconds /= g  # each rank of the group busy 1/g of the whole micro-batch's time
                group_seconds[key] = (seconds, g - 1)
            rank_times[k] += seconds
            if packs and measured:
                mixed[0] += 1
                mixed[1] += shapes > 1
            if log and log_it:
                padded = bool(st.padded_micro_batches[i]) if st.padded_micro_batches else False
                entry = {"strategy": strategy, "fused_adaln": fused, "epoch": st.epoch,
                         "step": st.step, "rank": ranks[0] if g > 1 and not ddp else s.rank, "ids": mb,
                         "padded": padded, "group": list(ranks),
                         "position": 0 if g > 1 and not ddp else ranks.index(s.rank),
                         "losses": per.detach().float().tolist(), "seconds": seconds}
                if mb_times is not None:  # the planner's price of it (with jitter or --rank-order interleaved)
                    entry["predicted_s"] = mb_times[st.step - plan_first][s.rank][i]
                if packs:  # the pack's distinct latent shapes (1: one bucket)
                    entry.update(packing="on", shapes=shapes)
                log.write(json.dumps(entry) + "\n")
        if ddp and not steps[0].micro_batches and args.parallel != "fsdp2":
            # A rank with nothing to train in a step still joins the step's all-reduce (DDP's,
            # or the explicit one over every parameter's gradient): a zero-weighted backward
            # through the model, so its gradient is zeros.
            x0 = torch.zeros((1, c.in_channels, 1, 2 * c.patch[1], 2 * c.patch[2]), device=device, dtype=dtype)
            ctx = torch.zeros((1, c.text_len, c.text_dim), device=device, dtype=dtype)
            t0 = torch.zeros(1, device=device)
            if varlen:  # through the packed forward (DDP's hooks are armed by the module it wraps)
                per = wan_dit_packed.flow_matching_loss_packed(model, list(x0), list(ctx), t=t0, noises=list(x0),
                                                               forward=wrapped)
            else:
                per = flow_matching_loss_of(wrapped, x0, ctx, t0, x0)
            (per.sum() * 0).backward()
        # Under torchrun, this rank's wall seconds from the step's start to the barrier (its
        # micro-batches and everything around them: inputs, logging) and its wait there.
        busy_s = time.perf_counter() - t_start
        busy_wait = (busy_s, sync_wait()) if ddp and not args.parallel else None
        # The explicit all-reduce runs on the process group's threads (gloo), which the thread
        # clock would not see: under torchrun its region is timed on the wall clock.
        with Timer(device, "wall" if ddp and not args.parallel else args.clock) as tm:
            if ddp and not args.parallel:
                link.gradient_sync(model, torch.distributed)  # as calibrate --allreduce-ranks times it
            opt.step()
            opt.zero_grad(set_to_none=True)
        return rank_times, tm.elapsed(), busy_wait

    total_steps = samplers[0].num_steps
    predicted_times = samplers[0].predicted_rank_times()  # [steps][W] seconds, the planner's model
    plan_first = samplers[0].num_steps - len(predicted_times)  # global index of the plan's first step
    # Every micro-batch's price, [steps][W][micro-batches]: with the profile's jitter, to price
    # the measured steps' spread (jitter_prediction); with --rank-order interleaved, to spread
    # each emulated rank's micro-batches over the step (interleaved_order).
    jitter = profile_jitter(args.profile)
    inputs_timed = inputs_timed_of(args)
    interleave_ranks = args.rank_order == "interleaved" and not ddp
    mb_times = samplers[0].predicted_micro_batch_times() if jitter or interleave_ranks else None
    warmup_in_loop = args.warmup
    run_steps = args.warmup + args.steps
    if args.epoch:
        # Warm-up on the epoch's first steps (schedule() does not move the samplers), then every step.
        warm = [s.schedule() for s in samplers]
        for _ in range(min(args.warmup, total_steps)):
            train_step([next(it) for it in warm], log_it=False, measured=False)
        del warm
        warmup_in_loop, run_steps = 0, 2**62  # until the epoch ends (a re-plan may change its step count)
    steps_iters = [s.steps() for s in samplers]
    times, extra, peaks, pred, waits = [], [], [], [], []
    samples = tokens = 0
    pred_mb = []
    adaptations = []
    stride = max(1, total_steps // run_steps) if args.spread else 1
    for t in range(run_steps):
        try:
            for _ in range(stride - 1):  # steps skipped by --spread: not run, not measured
                for it in steps_iters:
                    next(it)
            steps = [next(it) for it in steps_iters]
        except StopIteration:
            break
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        rank_times, sync_s, busy_wait = train_step(steps, log_it=True, measured=t >= warmup_in_loop)
        if ddp:
            gathered = [None] * dist_world
            torch.distributed.all_gather_object(gathered, (rank_times[0], busy_wait))
            rank_times, busy_wait = [g[0] for g in gathered], [g[1] for g in gathered]
        if t >= warmup_in_loop:
            pred.append(predicted_times[steps[0].step - plan_first])
            if jitter:
                pred_mb.append(mb_times[steps[0].step - plan_first])
            times.append(rank_times)
            extra.append(sync_s)
            if ddp and busy_wait[0] is not None:
                waits.append(busy_wait)  # per rank (busy, wait) wall seconds
            samples += steps[0].global_samples
            tokens += steps[0].global_tokens
            if device.type == "cuda":
                peaks.append(torch.cuda.max_memory_allocated())
        if args.adapt_every is not None:
            # Every rank has every rank's times (emulated, or all-gathered above): same update.
            fits = [s.observe_step(steps[0].step, rank_times) for s in samplers]
            if fits[0] is not None:
                adaptations.append(fits[0])
                steps_iters = [s.steps() for s in samplers]  # the re-planned rest of the epoch
                predicted_times = samplers[0].predicted_rank_times()
                plan_first = samplers[0].num_steps - len(predicted_times)
                mb_times = samplers[0].predicted_micro_batch_times() if jitter or interleave_ranks else None
        yield  # one step done: run_interleaved may advance another run here
    if log:
        log.close()
    if args.save_model:
        state = full_state_dict(model if varlen else wrapped, args.parallel if ddp else None)
        if dist_rank == 0:
            torch.save(state, args.save_model)
    measured = metrics(times, samples, tokens, extra)
    if feed is not None:
        measured.update(loader_waits(feed, times, W, ddp))
    if waits:
        # The idle fraction as the ranks saw it, on the wall clock: each rank's wait for the
        # slowest at the step's barrier over its busy time (from the step's start to the
        # barrier) and that wait; and the busy time outside the timed micro-batches (inputs,
        # unless the profile timed them with the micro-batches; logging, the loop; with --clock
        # thread also time the thread was not running), as a share of the busy time, which the
        # planner does not price.
        busy = sum(b for w in waits for b, _ in w)
        wait = sum(x for w in waits for _, x in w)
        measured["idle_measured"] = wait / (busy + wait) if busy + wait > 0 else 0.0
        measured["outside_compute"] = 1 - sum(map(sum, times)) / busy if busy > 0 else 0.0
        measured["busy_wait_s"] = waits
    # Per step beside the ranks' compute: the modelled all-reduce (real ranks only: emulated ones
    # run none) and the profile's optimizer step.
    budgets = samplers[0].budgets
    allreduce = (budgets.get("allreduce_s", 0.0) if ddp else 0.0) + budgets.get("step_fixed_s", 0.0)
    predicted = metrics(pred, samples, tokens, [allreduce] * len(pred))
    if jitter:
        # The same steps with the calibrated spread of every micro-batch's seconds.
        predicted["with_jitter"] = jitter_prediction(pred_mb, jitter, samples, tokens, [allreduce] * len(pred_mb))
    if peaks:
        total_mem = torch.cuda.get_device_properties(device).total_memory
        measured["peak_memory_bytes"] = max(peaks)
        measured["peak_memory_utilization"] = max(peaks) / total_mem
    return {
        "strategy": strategy,
        "fused_adaln": fused,
        "model": args.model,
        "config": args.config,
        "layers": c.layers,
        "world_size": W,
        "mode": (args.parallel or "ddp") if ddp else "emulated",  # ddp: the explicit all-reduce, or the wrapper
        "rank_order": None if ddp else args.rank_order,  # emulated: rank by rank, or spread over the step
        "parallel": args.parallel if ddp else None,
        "sync": getattr(samplers[0], "sync", None),
        "inputs": "per-sample" if per_sample else "stream",
        "inputs_timed": inputs_timed,  # drawn inside each micro-batch's timing (--time-inputs)
        # packing: "on" when the micro-batches were trained as packs (--packing on, or a strategy that
        # always packs); packs: this process's packs in the measured steps and those mixing shapes
        # (the planner may keep one-shape micro-batches where that plan is faster)
        "packing": "on" if packs else "off",
        "packed_forward": args.packed_forward if packs else None,
        "packs": {"trained": mixed[0], "mixed_shapes": mixed[1]} if packs else None,
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "clock": args.clock if device.type == "cpu" else "cuda events",
        "measured": measured,
        "predicted": predicted,
        "rank_times": times,
        "predicted_rank_times": pred,
        "plan_steps": total_steps,
        "adaptations": adaptations,
    }


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


def say_result(r: dict, args, dist_rank: int) -> None:
    """Rank 0 prints a run's line: measured and predicted idle and samples/s."""
    if dist_rank != 0:
        return
    m, p = r["measured"], r["predicted"]
    pk = f" packing={r['packing']:3s}" if args.packing != "off" or r["packing"] == "on" else ""
    print(f"{r['strategy']:13s}{pk} fused={'on ' if r['fused_adaln'] else 'off'} "
          f"imbalance {100 * m['imbalance']:5.1f}% "
          f"(predicted {100 * p['imbalance']:5.1f}%)  {m['throughput_samples_per_s']:8.2f} samples/s "
          f"(predicted {p['throughput_samples_per_s']:8.2f})  steps {m['steps']}"
          + (f"  with jitter: imbalance {100 * p['with_jitter']['imbalance']:5.1f}% "
             f"{p['with_jitter']['throughput_samples_per_s']:8.2f} samples/s" if "with_jitter" in p else "")
          + (f"  idle at the barrier {100 * m['idle_measured']:5.1f}% (busy outside the timed compute "
             f"{100 * m['outside_compute']:4.1f}%)" if "idle_measured" in m else "")
          + ("  waited for data (s): " + " ".join(f"r{i} {w:.3f}" for i, w in enumerate(m["data_wait_s"]))
             if "data_wait_s" in m else ""),
          flush=True)


def planned_runs(strategies: str, packing_opts: List[bool], fused_opts: List[bool]) -> List[tuple]:
    """(strategy, packing, fused) of every run. A packer (greedy_pack) packs whatever --packing
    says, so it runs once per kernel setting: under --packing both, packed (its one plan)."""
    runs = []
    for strategy in (s.strip() for s in strategies.split(",")):
        pks = packing_opts[-1:] if strategy in PACKING_STRATEGIES else packing_opts
        runs += [(strategy, pk, fu) for pk in pks for fu in fused_opts]
    return runs


def main(argv=None, exit_process: bool = False) -> List[dict]:
    """Runs the strategies and returns their summaries. exit_process (the script's entry):
    under torchrun, once every rank is done, the process ends at once (os._exit) instead of
    destroying the process group it made and shutting Python down."""
    args = parse_args(argv)
    if args.clock == "thread" and args.threads != 1:
        sys.exit("train_dit.py: --clock thread times this thread only: use it with --threads 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.parallel and int(os.environ.get("WORLD_SIZE", "1")) < 2:
        sys.exit(f"train_dit.py: --parallel {args.parallel} runs under torchrun with 2 or more processes "
                 "(WORLD_SIZE is not set or 1); without torchrun, ranks are emulated in one process")
    fused_opts = {"off": [False], "on": [True], "both": [False, True]}[args.fused]
    packing_opts = PACKINGS[args.packing]
    if args.save_model and len(args.strategy.split(",")) * len(fused_opts) * len(packing_opts) > 1:
        sys.exit("train_dit.py: --save-model takes one run: give one strategy, --fused on or off and --packing on "
                 "or off")
    dist_world = int(os.environ.get("WORLD_SIZE", "1"))
    dist_rank = 0
    # A caller that runs main() several times in one torchrun job (compare.py --repeat) makes
    # the process group once (init_distributed) and keeps it: re-creating it on the same
    # rendezvous can hang.
    owns_group = dist_world > 1 and not torch.distributed.is_initialized()
    if dist_world > 1:
        if owns_group:
            init_distributed(args.device)
        dist_rank = torch.distributed.get_rank()
        if args.device.startswith("cuda"):
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            args.device = f"cuda:{local}"
    runs = planned_runs(args.strategy, packing_opts, fused_opts)
    # What the plan leaves out is said once (the manifest and options are the same for every run).
    if args.interleave:
        results = run_interleaved([strategy_steps(args, strategy, fused, dist_rank, dist_world, report=i == 0,
                                                  packing=packing)
                                   for i, (strategy, packing, fused) in enumerate(runs)])
        for r in results:
            say_result(r, args, dist_rank)
    else:
        results = []
        for i, (strategy, packing, fused) in enumerate(runs):
            results.append(run_strategy(args, strategy, fused, dist_rank, dist_world, report=i == 0, packing=packing))
            say_result(results[-1], args, dist_rank)
    if dist_rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    if dist_world > 1:
        # Every rank done (rank 0 may still be writing) before gloo's connections close: a rank
        # tearing down while another still talks to it can abort in gloo's threads.
        torch.distributed.barrier()
        if owns_group and exit_process:
            # Everything is written and closed. Tearing gloo down (destroy_process_group, then
            # the interpreter's exit) aborts a rank now and then in gloo's threads ("terminate
            # called without an active exception": 1 run in 6 to 19 of the FSDP2 x4 test);
            # ending the process here skips that teardown.
            exit_now()
        if owns_group:
            torch.distributed.destroy_process_group()
    return results


def exit_now() -> None:
    """Ends the process with status 0 at once (os._exit: no process-group or interpreter
    teardown), its output flushed; for a torchrun script whose ranks are all done."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def init_distributed(device: str) -> None:
    """The torchrun job's process group: NCCL for a CUDA --device, else gloo."""
    torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")


if __name__ == "__main__":
    main(exit_process=True)
