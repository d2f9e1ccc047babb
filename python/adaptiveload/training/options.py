"""The training harness's options (train_dit's command line): the argparse types that
range-check every number when parsed, the parser, and what the options resolve to (the runs
of --strategy x --packing x --fused, the sampler's sync, the memory budget, whether inputs are
timed). Strategy names and sync modes come from the core's registry (adaptiveload._C), as the
sampler's do."""
import argparse
import math
import os
import sys
from typing import List, Optional

import torch

from .. import _C
from ..models import wan_dit
from ..sampler._ranges import MAX_INT64, MAX_MEM_BUDGET, MAX_SEED, MAX_SP_SIZE, MAX_WORLD_SIZE, SP_POLICIES, SYNCS
from .build import MODELS
from .metrics import profile_inputs_timed

PARALLEL = ["ddp", "fsdp2"]
PACKINGS = {"off": [False], "on": [True], "both": [False, True]}  # --packing: the runs per strategy
# Strategies that plan packs whatever --packing says (greedy_pack), from the registry.
PACKING_STRATEGIES = {s["name"] for s in _C.strategies() if s["packs"]}
SP_MODES = SP_POLICIES  # the sampler's sp words; or a group size
SP_MAX_GROUP = MAX_SP_SIZE  # the core's largest group, as the sampler's sp_sizes check
# The repository's manifests (data/): the default of a source checkout; an installed package
# has none, and --manifest names the data.
DEFAULT_MANIFESTS = [os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                                   "data", f)) for f in ("taichi_hd.csv", "coco2017_val_images.csv")]
PAPER = {"imbalance_equal_tokens": 0.39, "imbalance_dual": 0.189, "throughput_gain": 0.272,
         "vram_efficiency_gain": 0.227}


def strategy_names() -> List[str]:
    """The registered strategies' names in the registry's order (read at each call)."""
    return [s["name"] for s in _C.strategies()]


def sync_modes() -> List[str]:
    """The sync modes --sync takes: the core's, but "auto" (the sampler's default when --sync is not given)."""
    return [m for m in SYNCS if m != "auto"]


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


def parse_args(argv=None, doc: str = ""):
    """train_dit's options parsed (argparse exits naming a bad one); doc: the --help text's description."""
    return parser(doc).parse_args(argv)


# long-function: one add_argument per option, each with its help text; nothing to split
def parser(doc: str = "") -> argparse.ArgumentParser:
    """train_dit's command line; doc: the --help text's description (its first paragraph)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--manifest", "-m", action="append", help="manifest file(s); default: the built-in demo set")
    p.add_argument("--model", default="wan-dit", choices=MODELS, help="wan-dit: our Wan-style DiT; diffusers-wan: "
                   "diffusers' WanTransformer3DModel with the same dimensions (default: %(default)s)")
    p.add_argument("--config", default="tiny", choices=sorted(wan_dit.CONFIGS), help="model dimensions")
    p.add_argument("--layers", type=whole(1), help="override the number of blocks (>= 1; default: the "
                   "config's)")
    p.add_argument("--strategy", default="balanced", help=f"a registered strategy ({', '.join(strategy_names())}) "
                   "or a comma list of them (default: %(default)s)")
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
    p.add_argument("--sync", choices=sync_modes(), help="the sampler's sync mode: step (ranks may run different "
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
    return p


def inputs_timed_of(args) -> bool:
    """--time-inputs resolved: on, off, or (profile) as the profile was calibrated."""
    return profile_inputs_timed(args.profile) if args.time_inputs == "profile" else args.time_inputs == "on"


def mem_budget_of(args) -> Optional[int]:
    """The planner's memory budget in tokens per micro-batch: --mem-budget, or 4096 for --config
    tiny (a CPU's micro-batch), else None (auto: the device preset's memory)."""
    return args.mem_budget if args.mem_budget is not None else (4096 if args.config == "tiny" else None)


def sampler_sync_options(args) -> dict:
    """The sampler's sync keyword: --sync, else sync='micro' for FSDP2 (collectives in every
    micro-batch), else none (the sampler's default)."""
    sync = args.sync or ("micro" if args.parallel == "fsdp2" else None)
    return {"sync": sync} if sync is not None else {}


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


def planned_runs(strategies: str, packing_opts: List[bool], fused_opts: List[bool]) -> List[tuple]:
    """(strategy, packing, fused) of every run. A packer (greedy_pack) packs whatever --packing
    says, so it runs once per kernel setting: under --packing both, packed (its one plan)."""
    runs = []
    for strategy in (s.strip() for s in strategies.split(",")):
        pks = packing_opts[-1:] if strategy in PACKING_STRATEGIES else packing_opts
        runs += [(strategy, pk, fu) for pk in pks for fu in fused_opts]
    return runs
